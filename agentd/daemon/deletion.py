"""Deleting an agent or one of its conversations: moved to the trash, never erased.

A delete is refused (:class:`InUse`) while a turn of what it would move runs, or a
reflection of the agent runs (its lease in Redis is held). For the time of the move the
daemon holds that lease itself, so no worker starts a reflection of the agent meanwhile;
the check of running turns and the rename happen with no ``await`` between them, so no
turn of this daemon starts in between either.

Then what refers to the agent is dropped: its recall index, the daemon's open
conversations and memory repo, and its Redis keys (the lease, live-worktree markers, the
state and try count of its jobs, and its jobs still waiting in the queue, which would
otherwise run on an agent that is gone). The outbox goes with the agent's directory.
With Redis unreachable nothing can be running a reflection (a worker needs the lease),
so the delete goes ahead and says the keys were left to expire.

Deleting the agent's default conversation is allowed: the agent then has none, and its
next default-conversation turn starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis
import structlog

from agentd.daemon.agents import Agents
from agentd.daemon.turns import Turns
from agentd.recall.client import RecallClient
from agentd.reflection.outbox import OutboxEntry
from shared.clock import Clock
from shared.coordination import redis_keys, transfer
from shared.coordination.broker import locate
from shared.coordination.lease import ReflectionLease
from shared.errors import CorruptStateFile, InUse
from shared.models.agents import AgentRecord
from shared.reflection import events
from shared.settings import Settings
from shared.store.atomic import read_model
from shared.store.conversations import trash_conversation
from shared.store.layout import Layout, memory_lock
from shared.store.locks import async_file_lock

log = structlog.get_logger(__name__)

OUTCOMES_READ = 1_000
"""How many of the agent's last outcomes name job keys to drop (older ones have expired)."""
DELETE_OWNER = "agentd-delete"

RedisState = Literal["dropped", "unreachable"]


@dataclass(frozen=True)
class Deleted:
    agent_id: str
    trash: Path
    redis: RedisState

    def to_dict(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "trash": str(self.trash), "redis": self.redis}


class Deletions:
    def __init__(
        self,
        agents: Agents,
        turns: Turns,
        recall: RecallClient,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.agents = agents
        self.turns = turns
        self.recall = recall
        self.location = locate(settings)
        self.clock = clock
        self.lease_s = settings.reflection_lease_s
        """The reflection lease's TTL (``AGENTD_REFLECTION_LEASE_S``), which a deletion
        holds too."""

    async def delete_agent(self, record: AgentRecord) -> Deleted:
        layout = self.agents.layout
        async with self._reflection_held_off(record) as held:
            jobs = await asyncio.to_thread(_jobs, layout, record.id)
            async with async_file_lock(memory_lock(layout.memory_dir(record.id))):
                self._refuse_running_turns(record, None)
                trash = self.agents.store.trash(record.id, self.clock())
            self.agents.forget(record.id)
            self.recall.drop(record.id)
            if held is not None:
                await asyncio.to_thread(_drop_keys, held, record.id, jobs)
        log.info("agent_deleted", agent_id=record.id, trash=str(trash))
        return Deleted(record.id, trash, "dropped" if held is not None else "unreachable")

    async def delete_conversation(self, record: AgentRecord, conversation_id: str) -> Deleted:
        layout = self.agents.layout
        async with self._reflection_held_off(record) as held:
            self._refuse_running_turns(record, conversation_id)
            trash = trash_conversation(layout, record.id, conversation_id, self.clock())
            self.agents.forget(record.id, conversation_id)
            if record.default_conversation_id == conversation_id:
                record.default_conversation_id = None
                self.agents.store.save(record)
            self.recall.drop(record.id)
            self.recall.start([record.id])
        log.info(
            "conversation_deleted",
            agent_id=record.id,
            conversation_id=conversation_id,
            trash=str(trash),
        )
        return Deleted(record.id, trash, "dropped" if held is not None else "unreachable")

    @contextlib.asynccontextmanager
    async def _reflection_held_off(self, record: AgentRecord) -> AsyncIterator[redis.Redis | None]:
        """Hold the agent's reflection lease for the body (a Redis client to drop keys
        with), or None when Redis is unreachable; :class:`InUse` if a reflection runs."""
        client = self.location.client()
        lease = ReflectionLease(client, record.id, DELETE_OWNER, ttl_s=self.lease_s)
        try:
            try:
                acquired = await asyncio.to_thread(lease.acquire)
            except redis.RedisError as exc:
                log.warning("delete_without_redis", agent_id=record.id, error=str(exc))
                yield None
                return
            if not acquired:
                raise InUse(
                    f"a reflection of agent {record.name!r} is running; nothing was deleted. "
                    "Try again when it has finished (`agentctl status` shows it)"
                )
            try:
                yield client
            finally:
                await asyncio.to_thread(lease.release)
        finally:
            client.close()

    def _refuse_running_turns(self, record: AgentRecord, conversation_id: str | None) -> None:
        running = self.turns.running(record.id)
        if conversation_id is not None:
            running = [c for c in running if c == conversation_id]
        if running:
            what = f"conversation {conversation_id}" if conversation_id else f"{record.name!r}"
            raise InUse(
                f"a turn of {what} is running (conversation {', '.join(running)}); nothing "
                "was deleted. Try again when it has finished"
            )


@dataclass(frozen=True)
class _Jobs:
    """The agent's reflection jobs Redis may still know, and the inputs sent for them."""

    request_ids: set[str]
    input_ids: set[str]


def _jobs(layout: Layout, agent_id: str) -> _Jobs:
    """Those in its outbox (with the inputs each was sent) and those its outcome log names."""
    files = layout.reflection_files(agent_id)
    found = _Jobs({o.request_id for o in events.read(files.directory, tail=OUTCOMES_READ)}, set())
    for path in files.outbox.glob("*.json") if files.outbox.is_dir() else []:
        with contextlib.suppress(CorruptStateFile):
            entry = read_model(path, OutboxEntry)
            if entry is not None:
                found.request_ids.add(entry.request.request_id)
                if entry.ticket is not None:
                    found.input_ids.add(entry.ticket.input_id)
    return found


def _drop_keys(client: redis.Redis, agent_id: str, jobs: _Jobs) -> None:
    """Remove the agent's keys, its jobs' inputs and answers, and its queued jobs (the
    lease is released by its holder)."""
    request_ids = jobs.request_ids
    for input_id in jobs.input_ids:
        transfer.drop(client, input_id)
    doomed: list[str] = []
    for request_id in request_ids:
        doomed += [redis_keys.job_state(request_id), redis_keys.job_tries(request_id)]
    if doomed:
        client.delete(*doomed)
    for raw in client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1):
        try:
            task_id = json.loads(raw)["headers"]["id"]
        except (ValueError, KeyError, TypeError):
            continue
        if task_id in request_ids:
            # redis-py types LREM's value as str; it sends bytes as they are, and the
            # element must be matched byte for byte
            client.lrem(redis_keys.REFLECTION_QUEUE, 1, raw)  # type: ignore[arg-type]
    log.info("agent_redis_keys_dropped", agent_id=agent_id, jobs=len(request_ids))
