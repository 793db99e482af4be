"""Tool calls waiting for the user's yes, on the socket (``approval.list``,
``approval.approve``, ``approval.deny``) and for the web view.

A turn whose step calls a tool the agent's settings say needs approval stops with
``requires_approval`` and leaves the step on disk (:mod:`shared.agent.approval_step`).
Each call is answered once: the answer is checked and written under a per-conversation
lock held only for that, so of two clients answering the same call at once one records
it and the other is told ``already_answered`` at once, without waiting for the turn the
first one carries on. The answer that completes the step carries the turn on in the
same request (:meth:`agentd.daemon.turns.Turns.resume`), streaming its events as ``chat`` does;
an answer that leaves other calls of the step waiting returns them.

At start-up :meth:`Approvals.recover` settles what a crash cut short: a step answered in
full but not finished gets a result for each call that has none (nothing is run again,
see :mod:`shared.agent.approval_step`) and its turn a ``cancelled`` stop record. A step
still waiting for an answer is left as it is: it is listed and answered as before.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from agentd.daemon.agents import Agents
from agentd.daemon.replies import ApprovalAnswered, ApprovalList
from agentd.daemon.requests import ApprovalApprove, ApprovalDeny, ApprovalsList
from agentd.daemon.turns import Turns
from shared.agent.approval_step import recover
from shared.agent.loop import in_thread_to_the_end
from shared.errors import AgentdError, AlreadyAnswered, UnknownApproval
from shared.models.agents import AgentRecord
from shared.models.approvals import Decision, WaitingStep
from shared.models.events import Emit
from shared.models.turns import TurnResult
from shared.store.approvals import every_step, find_step, load_step, save_step, view
from shared.store.approvals import waiting_calls as stored_waiting_calls
from shared.store.conversations import Conversation

log = structlog.get_logger(__name__)

AfterTurn = Callable[[AgentRecord, Conversation, TurnResult, Emit], Awaitable[None]]
"""What the daemon does after every turn that ran (the reflection check, its notices)."""


class Approvals:
    def __init__(self, agents: Agents, turns: Turns, after_turn: AfterTurn) -> None:
        self.agents = agents
        self.turns = turns
        self.after_turn = after_turn
        self._answering: dict[tuple[str, str], asyncio.Lock] = {}

    async def list(self, params: ApprovalsList) -> ApprovalList:
        """Every call waiting for an answer (of one agent, or of all), oldest first."""
        agent_id = (await self.agents.resolve(params.agent)).id if params.agent else None
        calls = await asyncio.to_thread(stored_waiting_calls, self.agents.layout, agent_id)
        return ApprovalList(approvals=[self._named(call) for call in calls])

    def waiting_in(self, agent_id: str, conversation_id: str) -> builtins.list[dict[str, Any]]:
        """The calls of one conversation waiting for an answer (the web view's page)."""
        directory = self.agents.layout.conversation_dir(agent_id, conversation_id)
        step = load_step(directory)
        return [view(step, call) for call in step.waiting] if step is not None else []

    async def approve(self, params: ApprovalApprove, emit: Emit) -> ApprovalAnswered:
        return await self.answer(params.approval, "approved", None, emit)

    async def deny(self, params: ApprovalDeny, emit: Emit) -> ApprovalAnswered:
        return await self.answer(params.approval, "denied", params.reason, emit)

    async def answer(
        self,
        ref: str,
        decision: Decision,
        reason: str | None,
        emit: Emit,
        *,
        within: tuple[str, str] | None = None,
    ) -> ApprovalAnswered:
        """Record one answer; carry the turn on if it was the step's last. ``within``
        (agent id, conversation id): the call must be of that conversation."""
        found = await asyncio.to_thread(find_step, self.agents.layout, ref)
        if found is not None and within not in (
            None,
            (found[1].agent_id, found[1].conversation_id),
        ):
            found = None
        if found is None:
            raise UnknownApproval(
                f"no tool call waits with approval id {ref!r} (its step may have been "
                "answered and carried out long ago); `agentctl approvals` lists what waits"
            )
        directory, step, call = found
        record = self.agents.store.get(step.agent_id)
        conversation = self.agents.conversation(record, step.conversation_id)
        approval_id = call.approval_id
        lock = self._answering.setdefault((record.id, conversation.id), asyncio.Lock())
        async with lock:
            reloaded = await asyncio.to_thread(load_step, directory)
            again = reloaded.call(approval_id) if reloaded is not None and approval_id else None
            if reloaded is None or again is None:
                raise UnknownApproval(f"no tool call waits with approval id {ref!r}")
            step, call = reloaded, again
            if call.state != "waiting" or step.finished_at is not None:
                was = "denied" if call.state == "denied" else "approved"
                raise AlreadyAnswered(
                    f"approval {ref} ({call.name}) was {was} already; a call is answered once"
                )
            call.state, call.reason, call.answered_at = decision, reason, self.agents.clock()
            try:
                await in_thread_to_the_end(save_step, directory, step)
            except asyncio.CancelledError:
                self._let_go(conversation, step, "the turn was cancelled")
                raise
        log.info("approval_answered", approval_id=approval_id, decision=decision, tool=call.name)
        answered = self._named(view(step, call))
        if not step.answered:
            waiting = [self._named(view(step, c)) for c in step.waiting]
            return ApprovalAnswered(answered=answered, waiting=waiting, turn=None)
        try:
            result = await self.turns.resume(
                record, self.agents.memory(record.id), conversation, emit
            )
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)
            self._let_go(
                conversation, step, f"the turn {'was cancelled' if cancelled else 'failed'}"
            )
            raise
        await self.after_turn(record, conversation, result, emit)
        return ApprovalAnswered(answered=answered, waiting=[], turn=result)

    def _let_go(self, conversation: Conversation, answered: WaitingStep, why: str) -> None:
        """The request that completed a step's answers ends (its client hung up, or the
        turn could not start) before the loop carried the step out: settle it now, running
        nothing, or the conversation would take no message until agentd restarts. A step
        the loop took over it settles itself. On the event loop, as a cancel's stop
        record is written."""
        if not answered.answered:
            return
        try:
            step = load_step(conversation.directory)
            if step is not None and step.finished_at is None and step.answered:
                recover(conversation, step, self.agents.clock(), why)
        except (AgentdError, OSError) as exc:  # the next start settles it
            log.warning("approval_step_not_settled", turn_id=answered.turn_id, error=str(exc))

    def recover(self) -> int:
        """Settle every step whose carrying out a crash cut short; how many. Blocking."""
        settled = 0
        for _directory, step in every_step(self.agents.layout):
            if step.finished_at is not None or not step.answered:
                continue
            try:
                record = self.agents.store.get(step.agent_id)
                conversation = self.agents.conversation(record, step.conversation_id)
                recover(conversation, step, self.agents.clock())
            except AgentdError as exc:
                log.error("approval_step_not_recovered", turn_id=step.turn_id, error=exc.message)
                continue
            log.warning("approval_step_interrupted", turn_id=step.turn_id, agent_id=record.id)
            settled += 1
        return settled

    def _named(self, call: dict[str, Any]) -> dict[str, Any]:
        """A waiting call with its agent's name (what people know it by)."""
        try:
            name = self.agents.store.get(call["agent_id"]).name
        except AgentdError:
            name = call["agent_id"]
        return {**call, "agent": name}
