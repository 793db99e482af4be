"""The reflection pipeline's test world: an agent, a conversation, jobs run in process
(the daemon prepares, a worker runs, the daemon settles: :mod:`tests.support.reflection`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon.agents import Agents
from agentd.daemon.requests import AgentCreate
from shared.ids import new_id
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import Provider
from shared.providers.mock import MockProvider
from shared.reflection.policy import ReflectionOverrides
from shared.reflection.state import load_state, record_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.clock import FakeClock
from tests.support.reflection import InProcess

READ = json.dumps({"command": 'wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"'})
SAID = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]


@dataclass
class World:
    """An agent with a conversation in which the user said :data:`SAID`, and a way to run
    one reflection job on it in process (real git, real files, Redis only if given)."""

    home: Path
    agent: AgentRecord
    conversation: Conversation
    clock: FakeClock

    @property
    def memory(self) -> Path:
        return self.home / "agents" / self.agent.id / "memory"

    @property
    def reflections(self) -> Path:
        return self.home / "agents" / self.agent.id / "reflections"

    def say(self, *texts: str) -> None:
        for text in texts:
            self.conversation.append(
                [
                    self.conversation.new_message(role="user", content=text),
                    self.conversation.new_message(
                        role="assistant", content=f"（mock）我听到了：{text}"
                    ),
                ]
            )
            record_turn(self.conversation.directory, 1)

    def jobs(
        self,
        provider: Provider,
        redis_client: Any = None,
        agent_provider: Provider | None = None,
        **settings: Any,
    ) -> InProcess:
        """Both sides of this world's reflection jobs, with ``provider`` as the reflector."""
        return InProcess(
            Settings(home=self.home, reflection_lease_s=3, **settings),
            provider,
            agent_provider or MockProvider(),
            self.clock,
            redis_client,
        )

    def request(
        self, trigger: str = "step-count", request_id: str | None = None
    ) -> ReflectionRequest:
        return ReflectionRequest(
            request_id=request_id or new_id("rq"),
            agent_id=self.agent.id,
            conversation_ids=[self.conversation.id],
            trigger=trigger,  # type: ignore[arg-type]
            requested_at=self.clock(),
        )

    def reflect(
        self,
        provider: Provider,
        *,
        trigger: str = "step-count",
        redis_client: Any = None,
        request_id: str | None = None,
        agent_provider: Provider | None = None,
    ) -> ReflectionOutcome:
        jobs = self.jobs(provider, redis_client, agent_provider)
        return jobs.reflect(self.request(trigger, request_id))  # type: ignore[return-value]

    def merge_explicitly(self) -> None:
        """Set the agent's reflections to ``merge: explicit`` (it reviews each proposal)."""
        store = AgentStore(Layout(self.home))
        agent = store.get(self.agent.id)
        agent.reflection = ReflectionOverrides(merge="explicit")
        store.save(agent)

    def human(self) -> str:
        return (self.memory / "system" / "human.md").read_text()

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.memory), *args], check=True, capture_output=True, text=True
        ).stdout


def make_world(home: Path, clock: FakeClock) -> World:
    """Agent ``ada`` on ``home``, with a conversation in which the user said :data:`SAID`."""
    agents = Agents(Layout(home), clock=clock)
    agent = asyncio.run(agents.create(AgentCreate(name="ada")))
    conversation = agents.conversation(agent, None)
    world = World(home, agent, conversation, clock)
    world.say(*SAID)
    agents.close()
    return world


@pytest.fixture
def world(agentd_home: Path, clock: FakeClock) -> World:
    return make_world(agentd_home, clock)


def watermark(world: World) -> str | None:
    return load_state(world.conversation.directory).watermark
