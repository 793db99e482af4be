"""The daemon's side of reflection: decide after each turn, queue, send, and hear outcomes.

After every turn that ended ``end_turn`` the conversation's steps are counted and the
trigger decides; a due request is recorded in the outbox (:mod:`agentd.reflection.outbox`) before
the compaction flag it covers is consumed. Conversations that went quiet with unreflected
steps are asked for by the idle sweep (:mod:`agentd.reflection.idle_sweep`). Each agent has one
reflection sent at a time: the next one waits as the agent's pending request and is sent
when the running one's outcome arrives — a pending step-count or idle request is checked
again then (the running job may have covered its steps), a compaction or a manual
request is not. A consumed outcome that left messages unread asks for the next job at
once, until the conversation is reflected.

Everything here runs on the daemon's event loop, so file work (the state lock, the
outbox's fsync'd files) goes to threads; an agent's outbox is changed only under its
``_sending`` lock, so a request never joins an entry that is being sent.

A worker's answer is announced on a Redis stream and settled by the daemon, the one
writer of memory (:mod:`agentd.reflection.answers`); should the announcement be lost, the reconcile
loop finds the answer by asking Redis about the sent job, and an outcome recorded before
Redis lost its data is read from ``reflections/log.jsonl``. The reconcile loop also sends
again a job Redis does not know (after Redis lost its data) or that looks lost
(:mod:`shared.coordination.jobs`: no live worker holds its agent's lease), and what waited
for the broker: it alone sends a job again (Celery never does). It runs at start, then
every ``AGENTD_REFLECTION_RECONCILE_S``, and survives any error of one pass. A request a
gate settles as it is sent (``no_payload``, ``parent_dirty``…) has its outcome at once, as
a waiting turn hears it.
The client is told at the end of the turn that triggered the reflection if it finishes
within ``reflection_wait_s``, else at the end of the agent's next turn, or by
``agentctl reflect --wait``. An agent whose automatic reflection is paused
(:mod:`shared.reflection.pause`) is named at the end of its next chat, once per pause:
that warning replaces the notice of the failure that paused it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

import structlog

from agentd.jobs.prepare import Desk
from agentd.jobs.record import record as record_outcome
from agentd.reflection.answers import Answers
from agentd.reflection.idle_sweep import IdleSweep
from agentd.reflection.outbox import Outbox, OutboxEntry
from shared.clock import Clock, utc_now
from shared.coordination.broker import RedisLocation
from shared.errors import AgentdError
from shared.models.agents import AgentRecord
from shared.models.reflection import (
    CONSUMING_STATUSES,
    ReflectionOutcome,
    ReflectionRequest,
    TriggerSource,
)
from shared.models.turns import TurnResult
from shared.providers.factory import ProviderFactory
from shared.reflection import events
from shared.reflection.backoff import load_backoff
from shared.reflection.pause import Pause
from shared.reflection.policy import ReflectionSettings, configured_defaults, resolve
from shared.reflection.state import TranscriptState, peek_state
from shared.reflection.triggers import DueTrigger, post_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import Conversation
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

RECENT_KEPT = 256
"""Outcomes kept for a waiter that comes after them (a request a gate settled at once)."""
TOLD_ONCE = frozenset({"parent_dirty"})
"""Skips a user should hear about (once per kind): they wait for the user to act."""


class Reflections:
    def __init__(
        self,
        settings: Settings,
        layout: Layout,
        location: RedisLocation,
        store: AgentStore,
        *,
        providers: ProviderFactory | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.location = location
        self.store = store
        factory = providers or ProviderFactory(settings)
        self.desk = Desk(
            settings,
            agent_provider_for=lambda agent: factory.get(agent.model, agent.context_window),
            reader_window=lambda agent: (
                factory.get(
                    self.desk.reflection_model(agent), settings.reflection_context_window
                ).context_window
            ),
            clock=clock,
        )
        self.outbox = Outbox(layout, location, self.desk)
        self.answers = Answers(self.outbox, store, self._on_outcome)
        self._recent: dict[str, ReflectionOutcome] = {}
        self._waiters: dict[str, list[asyncio.Future[ReflectionOutcome]]] = defaultdict(list)
        self._notices: dict[str, list[ReflectionOutcome]] = defaultdict(list)
        self._tasks: list[asyncio.Task[None]] = []
        self._told: dict[str, set[str]] = defaultdict(set)
        self._told_pauses: dict[str, tuple[str, str]] = {}
        """Per agent, the pause (reason, setup) its chat was last told of."""
        self._sending: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.idle = IdleSweep(
            layout,
            store,
            self.settings_for,
            self.request_idle,
            idle_s=settings.reflection_idle_s,
            clock=clock,
        )

    # --- settings --------------------------------------------------------------------------

    def settings_for(self, agent: AgentRecord) -> ReflectionSettings:
        return resolve(configured_defaults(self.settings), agent.reflection)

    # --- requests --------------------------------------------------------------------------

    async def after_turn(
        self, agent: AgentRecord, conversation: Conversation, result: TurnResult
    ) -> ReflectionRequest | None:
        """The post-turn check (only for turns that ended ``end_turn``). Returns the request
        when one was made *and* sent now, so the caller may wait for it."""
        if result.stop_reason != "end_turn":
            return None
        recorded: list[ReflectionRequest] = []

        async def record(trigger: DueTrigger) -> None:
            recorded.append(await self._submit(agent.id, trigger, [conversation.id]))

        await post_turn(
            conversation.directory, self.settings_for(agent), result.assistant_messages, record
        )
        if not recorded:
            return None
        (request,) = recorded
        sent = await self.dispatch(agent.id)
        return request if sent is not None and sent.request_id == request.request_id else None

    async def request_manual(
        self,
        agent: AgentRecord,
        conversation_ids: list[str],
        *,
        recent: int | None,
        instruction: str | None,
    ) -> tuple[ReflectionRequest, bool]:
        """A manual request (run now, or next if one is running), and whether it is in
        Redis's hands or will be by the time the running one ends."""
        request = await self._submit(
            agent.id, "manual", conversation_ids, recent=recent, instruction=instruction
        )
        await self.dispatch(agent.id)
        return request, not self.outbox.broker_down

    async def request_idle(
        self, agent_id: str, conversation_ids: list[str]
    ) -> tuple[ReflectionRequest, list[str]] | None:
        """The idle sweep's request for those of ``conversation_ids`` that the agent's
        running or pending request does not cover already, and which those were."""
        async with self._sending[agent_id]:
            entries = await asyncio.to_thread(self.outbox.entries, agent_id)
            covered = {c for entry in entries for c in entry.request.conversation_ids}
            fresh = [c for c in conversation_ids if c not in covered]
            if not fresh:
                return None
            request = await asyncio.to_thread(self.outbox.submit, agent_id, "idle", fresh)
        await self.dispatch(agent_id)
        return request, fresh

    async def _submit(
        self,
        agent_id: str,
        trigger: TriggerSource,
        conversation_ids: list[str],
        *,
        recent: int | None = None,
        instruction: str | None = None,
    ) -> ReflectionRequest:
        """Record a request (:meth:`Outbox.submit`) without racing a send of the entry it
        joins."""
        async with self._sending[agent_id]:
            return await asyncio.to_thread(
                self.outbox.submit,
                agent_id,
                trigger,
                conversation_ids,
                recent=recent,
                instruction=instruction,
            )

    async def dispatch(self, agent_id: str) -> ReflectionRequest | None:
        """Send the agent's pending request if none is running; what was sent (or settled
        at once by a gate), if any."""
        async with self._sending[agent_id]:
            pending = await asyncio.to_thread(self._sendable, agent_id)
            if pending is None:
                return None
            sent = await asyncio.to_thread(self.outbox.send, pending)
        if isinstance(sent, ReflectionOutcome):
            await asyncio.to_thread(record_outcome, self.layout, sent, None)
            await self._on_outcome(sent)
            return pending.request
        return pending.request if sent else None

    def _sendable(self, agent_id: str) -> OutboxEntry | None:
        """The agent's pending entry, if none is sent and it is still due."""
        if self.outbox.sent(agent_id) is not None:
            return None
        pending = self.outbox.pending(agent_id)
        if pending is None or not self._still_due(pending):
            return None
        return pending

    def _still_due(self, entry: OutboxEntry) -> bool:
        """A pending step-count or idle request is checked again before it is sent: the
        job that ran meanwhile may have reflected the steps that made it due (spec: queued
        step counts are re-checked, compactions and manual runs are not)."""
        request = entry.request
        if request.trigger not in ("step-count", "idle"):
            return True
        try:
            agent = self.store.get(request.agent_id)
        except AgentdError:
            agent = None
        settings = self.settings_for(agent) if agent is not None else None
        due = [
            conversation_id
            for conversation_id in request.conversation_ids
            if settings is not None
            and _conversation_due(
                request.trigger,
                settings,
                peek_state(self.layout.conversation_dir(request.agent_id, conversation_id)),
            )
        ]
        if due == request.conversation_ids:
            return True
        if due:
            entry.request = request.model_copy(update={"conversation_ids": due})
            self.outbox.save(entry)
            return True
        self.outbox.remove(request.request_id, request.agent_id)
        log.info("reflection_request_no_longer_due", request_id=request.request_id)
        return False

    async def wait(self, request_id: str, timeout_s: float) -> ReflectionOutcome | None:
        settled = self._recent.pop(request_id, None)
        if settled is not None:  # settled before anyone waited: told here, not later
            notices = self._notices.get(settled.agent_id, [])
            if settled in notices:
                notices.remove(settled)
            return settled
        if timeout_s <= 0:
            return None
        future: asyncio.Future[ReflectionOutcome] = asyncio.get_running_loop().create_future()
        self._waiters[request_id].append(future)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            waiters = self._waiters.get(request_id, [])
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                self._waiters.pop(request_id, None)

    def take_notices(self, agent_id: str) -> list[ReflectionOutcome]:
        return self._notices.pop(agent_id, [])

    def worth_telling(self, outcome: ReflectionOutcome, paused: Pause | None = None) -> bool:
        """Whether to show an outcome in a chat. Successes and manual runs always are; an
        automatic failure, or a skip that waits for the user (uncommitted memory edits),
        once per kind until a reflection succeeds, so a broken setup does not repeat itself
        after every turn; other skips never. A held reflection is told, once: each is a
        proposal of its own waiting for an answer. An automatic failure that ``paused`` the
        agent is not: the pause's own warning, told with it, says more."""
        told = self._told[outcome.agent_id]
        if outcome.status in ("merged", "no_changes"):
            told.clear()
            return True
        if outcome.trigger == "manual" or outcome.status == "held":
            return True
        if outcome.status == "skipped" and outcome.reason not in TOLD_ONCE:
            return False
        if paused is not None and outcome.reason == paused.reason:
            return False
        kind = f"{outcome.status}:{outcome.reason}"
        if kind in told:
            return False
        told.add(kind)
        return True

    async def untold_pause(self, agent: AgentRecord) -> Pause | None:
        """The agent's pause if its chat has not been told of it yet: each pause (reason
        and model setup) is told once per daemon, and this call counts as telling."""
        state = await asyncio.to_thread(load_backoff, self.layout.reflections_dir(agent.id))
        pause = state.pause
        if pause is None or self._told_pauses.get(agent.id) == (pause.reason, pause.setup):
            return None
        self._told_pauses[agent.id] = (pause.reason, pause.setup)
        return pause

    # --- background loops ------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._reconcile_loop(), name="reflection-reconcile"),
            asyncio.create_task(self.answers.listen(), name="reflection-answers"),
            asyncio.create_task(self.idle.run(), name="reflection-idle-sweep"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.answers.stop()

    async def _reconcile_loop(self) -> None:
        try:
            await self.answers.sweep()
        except Exception:
            log.exception("reflection_sweep_failed")
        while True:
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reflection_reconcile_failed", hint="retrying in a few seconds")
            await asyncio.sleep(self.settings.reflection_reconcile_s)

    async def reconcile(self) -> None:
        """One pass over every agent's outbox: settle what finished, send again what Redis
        lost or what found the agent busy, and send what is pending."""
        for record in await asyncio.to_thread(self.store.list):
            try:
                await self._reconcile_agent(record.id)
            except AgentdError as exc:
                log.warning("reflection_reconcile_skipped", agent_id=record.id, error=exc.message)

    async def _reconcile_agent(self, agent_id: str) -> None:
        sent = await asyncio.to_thread(self.outbox.sent, agent_id)
        if sent is not None:
            await self._check_sent(sent)
        await self.dispatch(agent_id)

    async def _check_sent(self, sent: OutboxEntry) -> None:
        """Settle the sent request if its job finished, or send it again if it is lost.

        Redis is asked first; the outcome log (read whole) only when Redis cannot say, or
        says the job is unknown or lost: it may have finished before Redis lost its data."""
        status = await asyncio.to_thread(self.outbox.job_status, sent.request)
        if isinstance(status, ReflectionOutcome):
            await self._on_outcome(status)
            return
        if status == "answered":  # settled in a task of its own: a review takes a while
            self.answers.settle_later(sent.request.agent_id)
            return
        if status in (None, "unknown", "lost"):
            logged = await asyncio.to_thread(self.outbox.logged_outcome, sent.request)
            if logged is not None:
                await self._on_outcome(logged)
                return
        if status in ("unknown", "lost"):
            log.info("reflection_resent", request_id=sent.request.request_id, redis=status)
            async with self._sending[sent.request.agent_id]:
                resent = await asyncio.to_thread(self.outbox.send, sent)
            if isinstance(resent, ReflectionOutcome):  # a gate closed this time
                await asyncio.to_thread(record_outcome, self.layout, resent, None)
                await self._on_outcome(resent)

    async def _on_outcome(self, outcome: ReflectionOutcome) -> None:
        """Settle the request the outcome answers, start what waits, tell who waits."""
        if not events.answers_request(outcome):
            return
        if not self.outbox.remove(outcome.request_id, outcome.agent_id):
            return  # already settled (the stream and the logs both told us)
        if outcome.status in CONSUMING_STATUSES and outcome.unread:
            await self._submit(outcome.agent_id, outcome.trigger, outcome.unread)
        self._deliver(outcome)
        await self.dispatch(outcome.agent_id)

    def _deliver(self, outcome: ReflectionOutcome) -> None:
        waiters = self._waiters.pop(outcome.request_id, [])
        for future in waiters:
            if not future.done():
                future.set_result(outcome)
        if waiters:
            return
        self._recent[outcome.request_id] = outcome
        while len(self._recent) > RECENT_KEPT:
            del self._recent[next(iter(self._recent))]
        if outcome.status != "skipped" or outcome.reason in TOLD_ONCE:
            self._notices[outcome.agent_id].append(outcome)


def _conversation_due(
    trigger: TriggerSource, settings: ReflectionSettings, state: TranscriptState
) -> bool:
    """Whether a conversation of a pending automatic request still needs its reflection."""
    if settings.trigger == "off":
        return False
    if trigger == "idle":
        return state.steps_since_last_reflection > 0
    return settings.trigger == "step-count" and (
        state.steps_since_last_reflection >= settings.step_count
    )
