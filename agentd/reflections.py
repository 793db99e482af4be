"""The daemon's side of reflection: decide after each turn, enqueue, and hear outcomes.

After every turn that ended ``end_turn`` the conversation's transcript state counts its
steps and the pending compaction flag is consumed (always, whatever the trigger); if a
trigger is due a request goes to the outbox. Outcomes come back on a Redis stream (and,
should Redis lose them, from ``reflections/log.jsonl``); the client is told at the end of
the turn that triggered the reflection if it finishes within ``reflection_wait_s``, else
at the end of the agent's next turn, or by ``agentctl reflect --wait``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

import structlog

from agentd.outbox import RECONCILE_EVERY_S, Outbox, answers_request
from shared.coordination import keys
from shared.coordination.broker import RedisLocation
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.models.turns import TurnResult
from shared.reflection.settings import ReflectionSettings, configured_defaults, resolve
from shared.reflection.triggers import post_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import Conversation
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

STREAM_BLOCK_MS = 5_000
RETRY_S = 2.0


class Reflections:
    def __init__(
        self, settings: Settings, layout: Layout, location: RedisLocation, store: AgentStore
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.location = location
        self.store = store
        self.outbox = Outbox(layout, location)
        self._waiters: dict[str, list[asyncio.Future[ReflectionOutcome]]] = defaultdict(list)
        self._notices: dict[str, list[ReflectionOutcome]] = defaultdict(list)
        self._tasks: list[asyncio.Task[None]] = []
        self._told_failures: dict[str, set[str]] = defaultdict(set)

    # --- settings --------------------------------------------------------------------------

    def settings_for(self, agent: AgentRecord) -> ReflectionSettings:
        return resolve(configured_defaults(self.settings), agent.reflection)

    # --- requests --------------------------------------------------------------------------

    async def after_turn(
        self, agent: AgentRecord, conversation: Conversation, result: TurnResult
    ) -> ReflectionRequest | None:
        """The post-turn check (only for turns that ended ``end_turn``). Returns the request
        when one was made *and* handed to the broker, so the caller may wait for it."""
        if result.stop_reason != "end_turn":
            return None
        decision = post_turn(
            conversation.directory, self.settings_for(agent), result.assistant_messages
        )
        if decision.trigger is None:
            return None
        request = self.outbox.submit(
            agent.id,
            decision.trigger,
            [conversation.id],
            slice_key=f"{agent.id}:{conversation.id}:{decision.state.watermark}",
        )
        return request if await self.outbox.send_now(request) else None

    async def request_manual(
        self,
        agent: AgentRecord,
        conversation_ids: list[str],
        *,
        recent: int | None,
        instruction: str | None,
    ) -> tuple[ReflectionRequest, bool]:
        """A manual request, and whether it reached the broker."""
        request = self.outbox.submit(
            agent.id, "manual", conversation_ids, recent=recent, instruction=instruction
        )
        return request, await self.outbox.send_now(request)

    async def wait(self, request_id: str, timeout_s: float) -> ReflectionOutcome | None:
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

    def worth_telling(self, outcome: ReflectionOutcome) -> bool:
        """Whether to show an outcome in a chat: an automatic failure is told once per kind
        (``failed:<reason>``) until a reflection succeeds, so a broken setup does not
        repeat itself after every turn; manual runs and successes are always told."""
        seen = self._told_failures[outcome.agent_id]
        if outcome.status in ("merged", "no_changes"):
            seen.clear()
            return True
        if outcome.status != "failed" or outcome.trigger == "manual":
            return outcome.status != "skipped"
        key = f"failed:{outcome.reason}"
        if key in seen:
            return False
        seen.add(key)
        return True

    # --- background loops ------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._reconcile_loop(), name="reflection-reconcile"),
            asyncio.create_task(self._listen_loop(), name="reflection-outcomes"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reconcile_loop(self) -> None:
        while True:
            agent_ids = [record.id for record in self.store.list()]
            for outcome in await asyncio.to_thread(self.outbox.settle_from_logs, agent_ids):
                self._deliver(outcome)
            await self.outbox.send_pending(agent_ids)
            await asyncio.sleep(RECONCILE_EVERY_S)

    async def _listen_loop(self) -> None:
        import redis.asyncio as aioredis

        last_id: str | bytes | None = None
        while True:
            client = aioredis.Redis.from_url(self.location.redis_url)
            try:
                if last_id is None:
                    newest = await client.xrevrange(keys.OUTCOME_STREAM, count=1)
                    last_id = newest[0][0] if newest else "0-0"
                while True:
                    batches = await client.xread(
                        {keys.OUTCOME_STREAM: last_id}, block=STREAM_BLOCK_MS, count=100
                    )
                    for _stream, entries in batches or []:
                        for entry_id, fields in entries:
                            last_id = entry_id
                            self._on_stream_entry(fields)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down or restarted: outcomes also reach the logs
                log.debug("outcome_stream_unavailable", error=str(exc))
                await asyncio.sleep(RETRY_S)
            finally:
                await client.aclose()

    def _on_stream_entry(self, fields: dict[bytes, bytes]) -> None:
        raw = fields.get(b"outcome")
        if raw is None:
            return
        try:
            outcome = ReflectionOutcome.model_validate_json(raw)
        except ValueError:
            log.warning("unreadable_outcome_on_stream")
            return
        if answers_request(outcome):
            self.outbox.complete(outcome)
        self._deliver(outcome)

    def _deliver(self, outcome: ReflectionOutcome) -> None:
        if not answers_request(outcome):
            # Coalesced into a follow-up run, whose outcome will come; should the running
            # job's worker be dead, resend once its lease has expired.
            self.outbox.resend_in(outcome, self.settings.reflection_lease_s + 2)
            return
        waiters = self._waiters.pop(outcome.request_id, [])
        for future in waiters:
            if not future.done():
                future.set_result(outcome)
        if not waiters and outcome.status != "skipped":
            self._notices[outcome.agent_id].append(outcome)
