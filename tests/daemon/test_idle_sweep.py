"""The idle sweep: a conversation quiet for AGENTD_REFLECTION_IDLE_S with unreflected steps
gets one ``idle`` reflection per quiet spell; never for an agent whose trigger is off;
shown by ``status``. The clock is moved by hand; real Valkey, no worker (a job is "run" by
handing the daemon its outcome, as the stream would)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentd.reflection.reflections import Reflections
from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.reflection.policy import ReflectionOverrides
from shared.reflection.state import record_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.transcripts import say
from tests.support.workers import RedisForTests

IDLE_S = 86_400


def _agent(home: Path, name: str, reflection: ReflectionOverrides | None = None) -> AgentRecord:
    record = AgentRecord(id=f"agent-{name}", name=name, system_prompt="You help.")
    record.reflection = reflection
    Layout(home).agent_dir(record.id).mkdir(parents=True)
    AgentStore(Layout(home)).save(record)
    memory = Layout(home).memory_dir(record.id)
    MemoryRepo.create(memory, agent_id=record.id, agent_name=name, persona="", human="").close()
    return record


def _chat(home: Path, agent: AgentRecord, clock: FakeClock) -> Conversation:
    chat = Conversation.create(Layout(home), agent.id, memory_head=None, clock=clock)
    _turn(chat)
    return chat


def _turn(chat: Conversation) -> None:
    """What a turn leaves: its messages, the window saved as it ends, the step counted."""
    say(chat, "user", "I always want tabs")
    say(chat, "assistant", "ok")
    chat.save_context()
    record_turn(chat.directory, 1)


def _reflections(home: Path, clock: FakeClock) -> Reflections:
    settings = Settings(home=home)
    layout = Layout(home)
    return Reflections(settings, layout, locate(settings), AgentStore(layout), clock=clock)


def _queued_jobs(redis_server: RedisForTests) -> list[str]:
    messages = redis_server.client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1)
    return [json.loads(m)["headers"]["id"] for m in reversed(messages)]


def _skipped(request: ReflectionRequest) -> ReflectionOutcome:
    return ReflectionOutcome(
        reflection_id="r",
        request_id=request.request_id,
        agent_id=request.agent_id,
        conversation_ids=request.conversation_ids,
        trigger=request.trigger,
        status="skipped",
        reason="backoff",
    )


def test_a_quiet_conversation_gets_one_idle_reflection_per_quiet_spell(
    agentd_home: Path, redis_server: RedisForTests, clock: FakeClock
) -> None:
    agent = _agent(agentd_home, "ada")  # the default trigger, compaction-event
    quiet = _chat(agentd_home, agent, clock)
    busy = _chat(agentd_home, agent, clock)
    reflections = _reflections(agentd_home, clock)

    async def scenario() -> None:
        running = reflections.outbox.submit(agent.id, "manual", [quiet.id])
        assert await reflections.dispatch(agent.id) == running
        clock.advance(seconds=IDLE_S - 1)
        assert await reflections.idle.sweep() == []
        clock.advance(seconds=1)
        _turn(busy)
        assert await reflections.idle.sweep() == []  # the running request covers it

        await reflections._on_outcome(_skipped(running))
        (request,) = await reflections.idle.sweep()
        assert (request.trigger, request.conversation_ids) == ("idle", [quiet.id])
        assert _queued_jobs(redis_server) == [running.request_id, request.request_id]

        await reflections._on_outcome(_skipped(request))  # it reflected nothing
        clock.advance(hours=1)
        assert await reflections.idle.sweep() == [], "swept twice in one quiet spell"

        _turn(quiet)
        clock.advance(seconds=IDLE_S)
        (again,) = await reflections.idle.sweep()
        assert again.trigger == "idle"
        assert sorted(again.conversation_ids) == sorted([quiet.id, busy.id])

    asyncio.run(scenario())


def test_no_idle_reflection_for_an_agent_whose_trigger_is_off(
    agentd_home: Path, redis_server: RedisForTests, clock: FakeClock
) -> None:
    agent = _agent(agentd_home, "bob", ReflectionOverrides(trigger="off"))
    _chat(agentd_home, agent, clock)
    reflections = _reflections(agentd_home, clock)
    clock.advance(seconds=IDLE_S)

    assert asyncio.run(reflections.idle.sweep()) == []
    assert reflections.outbox.entries(agent.id) == []


def test_status_shows_the_sweep_and_the_last_idle_request(
    daemon: DaemonRunner, clock: FakeClock
) -> None:
    running = daemon.start(clock=clock)
    chat = daemon.result("chat", {"text": "I always want tabs"})
    clock.advance(seconds=IDLE_S)
    assert daemon.loop is not None

    (request,) = asyncio.run_coroutine_threadsafe(
        running.reflections.idle.sweep(), daemon.loop
    ).result(30)
    status = daemon.result("status")

    assert status["idle_sweep"]["idle_s"] == IDLE_S
    assert status["idle_sweep"]["last_sweep_at"] == clock().isoformat()
    (agent,) = status["agents"]
    assert agent["last_idle_request"] == {
        "conversation_id": chat["conversation_id"],
        "request_id": request.request_id,
        "requested_at": clock().isoformat(),
    }
