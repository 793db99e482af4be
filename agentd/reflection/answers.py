"""The daemon hears workers' answers and settles them, one job of an agent at a time.

A worker that stores an answer announces it on a Redis stream
(:data:`shared.coordination.transfer.ANSWER_STREAM`); the daemon listens there, and its
reconcile loop also asks about each sent job, so an answer whose announcement was missed
(the daemon was down, the stream lost it) is settled all the same. Settling
(:func:`agentd.jobs.settle.settle`) runs as a task of its own on the daemon's loop, its git
work in threads and, in explicit merge mode, the agent's review as a turn: no chat waits
for it, and no other agent's answers wait either. An agent's answer is settled once: a
second announcement while the first is being settled is ignored, and one whose request
was settled already finds no sent entry for it.

At start the daemon clears what it left behind if it died while settling (clones,
branches and half-landed refs of memory): only it writes memory, so nothing there belongs
to a live job then (:func:`agentd.jobs.checkout.sweep_orphans`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

import structlog

from agentd.jobs.checkout import sweep_orphans
from agentd.jobs.record import record
from agentd.jobs.settle import read_answer, settle
from agentd.reflection.outbox import Outbox
from shared.coordination import transfer
from shared.coordination.replies import range_entries, stream_entries
from shared.errors import AgentdError, InvalidAnswer
from shared.models.reflection import ReflectionOutcome
from shared.reflection.job import JobAnswer
from shared.store.agents import AgentStore

log = structlog.get_logger(__name__)


class Answers:
    def __init__(
        self,
        outbox: Outbox,
        store: AgentStore,
        on_outcome: Callable[[ReflectionOutcome], Awaitable[None]],
    ) -> None:
        self.outbox = outbox
        self.store = store
        self.desk = outbox.desk
        self.on_outcome = on_outcome
        self._settling: set[str] = set()
        """Agents whose answer is being settled (or whose leftovers are being swept)."""
        self._tasks: set[asyncio.Task[None]] = set()

    def settle_later(self, agent_id: str, input_id: str | None = None) -> None:
        """Settle the agent's answer in a task of its own (unless one is at it already)."""
        if agent_id in self._settling:
            return
        self._settling.add(agent_id)
        task = asyncio.create_task(self._settle(agent_id, input_id), name=f"settle-{agent_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, agent_id: str, input_id: str | None) -> None:
        try:
            outcome = await self._settled(agent_id, input_id)
        except Exception:
            log.exception("reflection_settle_failed", agent_id=agent_id)
            return
        finally:
            self._settling.discard(agent_id)
        if outcome is not None:
            await self.on_outcome(outcome)

    async def _settled(self, agent_id: str, input_id: str | None) -> ReflectionOutcome | None:
        entry = await asyncio.to_thread(self.outbox.sent, agent_id)
        if entry is None or entry.ticket is None:
            return None
        if input_id is not None and entry.ticket.input_id != input_id:
            log.info("reflection_answer_for_old_inputs", input_id=input_id)
            return None
        found = await asyncio.to_thread(self.outbox.answer, entry)
        if found is None:
            if input_id is None:  # Redis says answered, and holds no answer for these inputs
                log.warning("reflection_answer_gone", request_id=entry.request.request_id)
                await asyncio.to_thread(self.outbox.answer_gone, entry)
            return None
        raw, bundle = found
        answer: JobAnswer | InvalidAnswer
        try:
            answer = read_answer(raw)
        except InvalidAnswer as exc:
            answer = exc
        with structlog.contextvars.bound_contextvars(
            agent_id=agent_id, request_id=entry.request.request_id
        ):
            outcome = await settle(self.desk, entry.request, entry.ticket, answer, bundle)
            await asyncio.to_thread(self._record, outcome, entry.ticket.input_id)
            log.info(
                "reflection_finished",
                status=outcome.status,
                reason=outcome.reason,
                seconds=round(outcome.duration_s, 2),
            )
        return outcome

    def _record(self, outcome: ReflectionOutcome, input_id: str | None) -> None:
        client = self.outbox.client()
        try:
            record(self.desk.layout, outcome, client, input_id)
        finally:
            client.close()

    # --- the stream --------------------------------------------------------------------

    async def listen(self) -> None:
        every_s = self.desk.settings.reflection_reconcile_s
        last_id: str | bytes | None = None
        while True:
            client = self.outbox.location.async_client(blocks_s=every_s)
            try:
                if last_id is None:
                    newest = range_entries(await client.xrevrange(transfer.ANSWER_STREAM, count=1))
                    last_id = newest[0][0] if newest else "0-0"
                while True:
                    batches = await client.xread(
                        {transfer.ANSWER_STREAM: last_id}, block=round(every_s * 1000), count=100
                    )
                    for entry_id, fields in stream_entries(batches):
                        last_id = entry_id
                        await self._heard(fields)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down or restarted: reconcile asks later
                log.debug("answer_stream_unavailable", error=str(exc))
                await asyncio.sleep(every_s)
            finally:
                await client.aclose()

    async def _heard(self, fields: dict[bytes, bytes]) -> None:
        raw = fields.get(transfer.ANSWER_FIELD.encode())
        try:
            heard = json.loads(raw) if raw is not None else None
        except ValueError:
            heard = None
        if not isinstance(heard, dict) or not isinstance(heard.get("agent_id"), str):
            log.warning("unreadable_answer_on_stream")
            return
        if "status" in heard:  # a notice that settles nothing: logged with the outcomes
            await asyncio.to_thread(self._notice, raw)
            return
        self.settle_later(heard["agent_id"], heard.get("input_id"))

    def _notice(self, raw: bytes | None) -> None:
        try:
            answer = JobAnswer.model_validate_json(raw or b"")
        except ValueError:
            return
        entry = self.outbox.sent(answer.agent_id)
        if entry is None or entry.request.request_id != answer.job_id:
            return
        outcome = self.desk.outcome(entry.request, answer.status, answer.reason, answer.message)
        record(self.desk.layout, outcome, None)

    # --- start and stop ----------------------------------------------------------------

    async def sweep(self) -> None:
        """Clear what a daemon that died while settling left in each agent's memory."""
        for agent in await asyncio.to_thread(self.store.list):
            if agent.id in self._settling:
                continue
            self._settling.add(agent.id)
            try:
                layout = self.desk.layout
                memory_dir = layout.memory_dir(agent.id)
                if (memory_dir / ".git").is_dir():
                    worktrees = layout.reflection_files(agent.id).worktrees
                    await asyncio.to_thread(sweep_orphans, memory_dir, worktrees)
            except AgentdError as exc:
                log.warning("reflection_sweep_skipped", agent_id=agent.id, error=exc.message)
            finally:
                self._settling.discard(agent.id)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
