"""Whether a reflection run succeeded, and how much of its payload it may consume.

A run that ends without an error is not yet a reflection. Weak models end cleanly with an
empty reply, narrate "I will now read the transcript" and stop, or run ``wc -c
"$TRANSCRIPT_PATH"`` and report "nothing durable" (seed 001). Counted as success, each
becomes ``no_changes`` and the slice is marked reflected for good. So a run succeeds only
if it ended its turn on its own, its tools showed it the payload (a message of it came back
in a tool result: :mod:`shared.reflection.coverage`), and it left a non-empty report; and
it consumes each slice only as far as it read it.

The daemon judges: a worker sends back the sub-agent's transcript, and the verdict comes
from it and the payload the daemon wrote, never from what the worker says of its run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from shared.models.messages import AssistantMessage, Message, StopReason, StopRecord
from shared.reflection.coverage import Reading
from shared.reflection.payload import PayloadFile
from shared.reflection.slices import Slice

Reason = Literal["ok", "not_read", "empty_report"] | StopReason
"""``ok``; ``not_read`` (no tool result showed the payload's messages); ``empty_report``;
or the loop's stop reason when the run did not end on its own (``max_steps``, ``error``,
``cancelled``, ``max_tokens``, ...)."""


class Verdict(BaseModel):
    success: bool
    reason: Reason
    consumed: list[Slice]
    """The unreflected slices, each cut to where the reading stopped; what a consumed
    outcome may mark reflected (empty unless ``success``)."""
    unread: list[str]
    """Conversations with unreflected messages left after what is consumed: shown but not
    read, or never shown because the job's budget was spent."""


def judge(messages: list[Message], payload: PayloadFile, final_report: str) -> Verdict:
    """The verdict of a finished run, from its transcript and final report.

    Checked in this order: a stopped run (its last stop reason is not ``end_turn``), a
    payload none of whose messages came back in a tool result, an empty report.
    """
    reading = Reading(payload, [m.content for m in messages if m.role == "tool"])
    read = [(shown, reading.consumed(shown)) for shown in payload.slices]
    stop = _last_stop_reason(messages)
    if stop is not None and stop != "end_turn":
        return _failed(stop, payload)
    if not any(through for _, through in read):
        return _failed("not_read", payload)
    if not final_report.strip():
        return _failed("empty_report", payload)
    unreflected = [(shown, through) for shown, through in read if shown.slice.mode == "unreflected"]
    return Verdict(
        success=True,
        reason="ok",
        consumed=[through for _, through in unreflected if through is not None],
        unread=[
            shown.slice.conversation_id
            for shown, through in unreflected
            if not shown.complete or through != shown.slice
        ],
    )


def _failed(reason: Reason, payload: PayloadFile) -> Verdict:
    unreflected = [s.slice.conversation_id for s in payload.slices if s.slice.mode == "unreflected"]
    return Verdict(success=False, reason=reason, consumed=[], unread=unreflected)


def _last_stop_reason(messages: list[Message]) -> StopReason | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage | StopRecord) and message.stop_reason is not None:
            return message.stop_reason
    return None


def final_report(messages: list[Message]) -> str:
    """The reply that ended the turn by itself; a stopped run has no report."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage | StopRecord) and message.stop_reason is not None:
            return message.content if message.stop_reason == "end_turn" else ""
    return ""
