"""A step that waits for the user's approval: made when the model calls a tool that needs
a yes, settled when a crash or a cancel cut its carrying out short.

Every call of such a step waits, not only the ones that need approval: the model gave
its calls in an order (write a file, then run it), and running the rest first would run
them out of it. Once every call is answered the loop carries the step out in that order
(:meth:`shared.agent.loop._TurnRunner.resume`): a denied call gets the denial as its
result, every other call runs.

**Never run twice.** A call is marked ``running`` on disk before its tool starts. If the
daemon dies, or the turn is cancelled, before the call's result is logged, nobody knows
whether it took effect: it is given a result saying so, and it is not run again. Calls of
the step that had not started are not run either (they may depend on the one that was
cut short), and each is given a result saying that. The model reads all of it in the
conversation's next turn; the user reads it in the transcript.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from shared.ids import new_id
from shared.message_refs import short_id
from shared.models.approvals import PendingCall, WaitingStep
from shared.models.messages import Message, StopPayload, ToolCall, ToolResult, Usage
from shared.store.approvals import save_step
from shared.store.conversations import Conversation

log = structlog.get_logger(__name__)

INTERRUPTED_CODE = "interrupted"
"""The stop record's code when the daemon died while a step was carried out."""


def new_step(
    conversation: Conversation,
    *,
    turn_id: str,
    message_id: str,
    calls: list[ToolCall],
    needs_approval: frozenset[str],
    steps: int,
    assistant_messages: int,
    usage: Usage,
) -> WaitingStep:
    """The step of ``calls``: those to tools in ``needs_approval`` wait for an answer,
    each with its own approval id; the others are approved already."""
    return WaitingStep(
        agent_id=conversation.agent_id,
        conversation_id=conversation.id,
        turn_id=turn_id,
        message_id=message_id,
        created_at=conversation.clock(),
        steps=steps,
        assistant_messages=assistant_messages,
        usage=usage,
        calls=[
            PendingCall(
                tool_call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                approval_id=new_id("apr") if call.name in needs_approval else None,
                state="waiting" if call.name in needs_approval else "approved",
            )
            for call in calls
        ],
    )


def denial(reason: str | None) -> str:
    """The tool result a denied call gets: what the model is told."""
    return f"the user denied this call: {reason}" if reason else "the user denied this call"


def answered_calls(conversation: Conversation, step: WaitingStep) -> set[str]:
    """The step's calls whose result is in the log (read back to the step's message)."""
    found: set[str] = set()
    for message in conversation.log.iter_reversed():
        if message.id == step.message_id:
            break
        if isinstance(message, ToolResult) and message.tool_call_id is not None:
            found.add(message.tool_call_id)
    return found


def settle(conversation: Conversation, step: WaitingStep, why: str, now: datetime) -> list[str]:
    """Give every call of a step cut short a result, run nothing, mark it finished.

    ``why`` is what cut it short ("agentd stopped", "the turn was cancelled"). Returns
    the ids of the messages appended. Blocking (it appends, fsync'd)."""
    logged = answered_calls(conversation, step)
    results: list[Message] = []
    for call in step.calls:
        if call.tool_call_id in logged:
            continue
        text, interrupted = _unfinished(call, why)
        if interrupted:
            log.warning("approved_call_interrupted", tool=call.name, tool_call_id=call.tool_call_id)
        results.append(
            conversation.new_message(
                role="tool",
                content=text,
                tool_call_id=call.tool_call_id,
                name=call.name,
                is_error=True,
                turn_id=step.turn_id,
            )
        )
    if results:
        conversation.append(results)
    step.finished_at = now
    save_step(conversation.directory, step)
    return [m.id for m in results]


def recover(
    conversation: Conversation, step: WaitingStep, now: datetime, why: str = "agentd stopped"
) -> None:
    """Settle an answered step that nothing will carry out any more, and end its turn with
    a stop record (``cancelled``, code ``interrupted``), as nothing else did: after a
    restart (the daemon died carrying it out), or when the request that answered it was
    cancelled before the loop took it over. Blocking."""
    settle(conversation, step, why, now)
    stop = conversation.new_message(
        role="assistant",
        kind="stop",
        content=f"{why} before this turn's approved calls were all carried out; nothing "
        "was run twice",
        stop_reason="cancelled",
        payload=StopPayload(code=INTERRUPTED_CODE),
        turn_id=step.turn_id,
    )
    conversation.append([stop])
    conversation.save_context()


def still_waiting(agent_name: str, step: WaitingStep) -> str:
    """Why a new message is refused (:class:`~shared.errors.ApprovalPending`): the calls
    that wait and how to answer them."""
    waiting = step.waiting
    if not waiting:
        return (
            "this conversation's approved calls are being carried out; send the message "
            "again once that turn has finished"
        )
    calls = "; ".join(
        f"{call.name}({call.arguments}) as approval {short_id(call.approval_id or '')}"
        for call in waiting
    )
    first = short_id(waiting[0].approval_id or "")
    return (
        f"{agent_name}'s turn in this conversation waits for your answer on {calls}; "
        f"answer it first with `agentctl approve {first}` or `agentctl deny {first} "
        "--reason TEXT` (`agentctl approvals` lists what waits). Your message was not sent"
    )


def _unfinished(call: PendingCall, why: str) -> tuple[str, bool]:
    """The result of a call the step never finished, and whether it may have run."""
    if call.state == "denied":
        return denial(call.reason), False
    if call.state == "running":
        return (
            f"[interrupted: {why} while this approved call ran, so it may or may not have "
            "taken effect; it was not run again. Check before trying it again]",
            True,
        )
    return f"[not run: {why} before this approved call started; it was not run]", False
