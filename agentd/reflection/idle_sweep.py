"""The idle sweep: a conversation that went quiet with unreflected steps gets reflected.

letta-code reflects quiet conversations: what was said just before the user walked away
should not wait, unreflected, until they come back. Every few minutes the daemon looks at
every conversation of every agent whose trigger is not ``off``; one whose last turn
ended (``context.json``'s ``updated_at``, stamped by the daemon's clock) at least
``AGENTD_REFLECTION_IDLE_S`` ago (24 h by default) and that has unreflected steps is
asked for a reflection with trigger ``idle``.

Once per quiet spell: ``reflections/idle-sweep.json`` records, per conversation, how many
steps it had when it was swept, and it is swept again only once it has more (new turns,
then another quiet spell), so a reflection that fails or is skipped is not asked for
every few minutes. A conversation the agent's running or pending request already covers
is not asked for at all (:meth:`agentd.reflection.reflections.Reflections.request_idle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from pydantic import BaseModel, Field

from shared.clock import Clock
from shared.errors import CorruptStateFile
from shared.models.agents import AgentRecord, ContextState
from shared.models.reflection import ReflectionRequest
from shared.reflection.policy import ReflectionSettings
from shared.reflection.state import peek_state
from shared.store.agents import AgentStore
from shared.store.atomic import read_model, write_model_atomic
from shared.store.conversations import scan_conversations
from shared.store.layout import ConversationFiles, Layout

log = structlog.get_logger(__name__)

SWEEP_EVERY_S = 600.0
"""How often the sweep runs (more often only if the idle time itself is shorter)."""

RequestIdle = Callable[[str, list[str]], Awaitable[tuple[ReflectionRequest, list[str]] | None]]
"""Ask for an idle reflection of an agent's conversations: the request and the
conversations it was asked for (None when the running or pending one covers them all)."""


class Swept(BaseModel):
    steps: int
    """The conversation's completed steps when it was swept."""
    at: datetime
    request_id: str


class IdleMarks(BaseModel):
    """One agent's swept conversations (``reflections/idle-sweep.json``)."""

    conversations: dict[str, Swept] = Field(default_factory=dict)

    def last(self) -> tuple[str, Swept] | None:
        if not self.conversations:
            return None
        return max(self.conversations.items(), key=lambda item: item[1].at)


def load_marks(layout: Layout, agent_id: str) -> IdleMarks:
    """The agent's marks; a damaged file is reported and read as none (it costs at most
    one more idle reflection per conversation)."""
    path = layout.reflection_files(agent_id).idle_marks
    try:
        return read_model(path, IdleMarks) or IdleMarks()
    except CorruptStateFile as exc:
        log.warning("idle_sweep_marks_unreadable", path=str(path), error=exc.message)
        return IdleMarks()


def quiet_conversations(
    layout: Layout, agent_id: str, now: datetime, idle_s: float
) -> dict[str, int]:
    """The agent's conversations to sweep now, each with its completed steps."""
    marks = load_marks(layout, agent_id)
    quiet: dict[str, int] = {}
    for conversation_id in scan_conversations(layout, agent_id).ids:
        directory = layout.conversation_dir(agent_id, conversation_id)
        try:
            context = read_model(ConversationFiles(directory).context, ContextState)
        except CorruptStateFile:
            continue  # opening the conversation reports it; its next turn rewrites it
        if context is None or now - context.updated_at < timedelta(seconds=idle_s):
            continue
        state = peek_state(directory)
        swept = marks.conversations.get(conversation_id)
        if state.steps_since_last_reflection == 0:
            continue
        if swept is not None and swept.steps >= state.total_completed_steps:
            continue
        quiet[conversation_id] = state.total_completed_steps
    return quiet


def mark_swept(
    layout: Layout, agent_id: str, steps: dict[str, int], request_id: str, at: datetime
) -> None:
    marks = load_marks(layout, agent_id)
    for conversation_id, count in steps.items():
        marks.conversations[conversation_id] = Swept(steps=count, at=at, request_id=request_id)
    path = layout.reflection_files(agent_id).idle_marks
    path.parent.mkdir(parents=True, exist_ok=True)
    write_model_atomic(path, marks)


class IdleSweep:
    """The daemon's periodic pass; its files are read and written in threads."""

    def __init__(
        self,
        layout: Layout,
        store: AgentStore,
        settings_for: Callable[[AgentRecord], ReflectionSettings],
        request: RequestIdle,
        *,
        idle_s: float,
        clock: Clock,
    ) -> None:
        self.layout = layout
        self.store = store
        self.settings_for = settings_for
        self.request = request
        self.idle_s = idle_s
        self.clock = clock
        self.last_sweep_at: datetime | None = None

    @property
    def every_s(self) -> float:
        return min(SWEEP_EVERY_S, self.idle_s)

    async def run(self) -> None:
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("idle_sweep_failed", hint="it runs again at the next sweep")
            await asyncio.sleep(self.every_s)

    async def sweep(self) -> list[ReflectionRequest]:
        """One pass over every agent; the requests it made."""
        now = self.clock()
        self.last_sweep_at = now
        made = []
        for record in await asyncio.to_thread(self.store.list):
            if self.settings_for(record).trigger == "off":
                continue
            quiet = await asyncio.to_thread(
                quiet_conversations, self.layout, record.id, now, self.idle_s
            )
            if not quiet:
                continue
            asked = await self.request(record.id, list(quiet))
            if asked is None:
                continue
            request, conversation_ids = asked
            steps = {c: quiet[c] for c in conversation_ids}
            await asyncio.to_thread(
                mark_swept, self.layout, record.id, steps, request.request_id, now
            )
            log.info(
                "idle_reflection_requested",
                agent_id=record.id,
                conversations=conversation_ids,
                request_id=request.request_id,
            )
            made.append(request)
        return made

    def status(self) -> dict[str, Any]:
        """For ``agentctl status``: the idle time, and when the sweep ran and runs next."""
        last = self.last_sweep_at
        return {
            "idle_s": self.idle_s,
            "last_sweep_at": last.isoformat() if last else None,
            "next_sweep_at": (last + timedelta(seconds=self.every_s)).isoformat() if last else None,
        }
