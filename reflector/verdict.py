"""Whether a reflection run succeeded: success must be earned, not merely not-failed.

A run that ends without an error is not yet a reflection. Weak models end cleanly with an
empty reply, or narrate "I will now read the transcript" and stop without a tool call
(seed 001). Counted as success, either becomes ``no_changes`` and the slice is marked
reflected for good. So a run succeeds only if it touched the payload with a tool, ended
its turn on its own, and left a non-empty report; anything else fails and the slice is
offered again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from shared.models.messages import Message, StopReason

Reason = Literal["ok", "not_read", "empty_report"] | StopReason
"""``ok``; ``not_read`` (no tool call referenced the payload); ``empty_report``; or the
loop's stop reason when the run did not end on its own (``max_steps``, ``error``,
``cancelled``, ``max_tokens``, ...)."""

PAYLOAD_VARIABLE = "TRANSCRIPT_PATH"


def earned_success(
    conversation_messages: list[Message], payload_path: Path, final_report: str
) -> tuple[bool, Reason]:
    """``(ok, reason)`` for a finished run, from its transcript and final report.

    Checked in this order: a stopped run (its last stop reason is not ``end_turn``), a
    payload never read, an empty report. The first failure found is the reason.
    """
    stop = _last_stop_reason(conversation_messages)
    if stop is not None and stop != "end_turn":
        return False, stop
    if not any(_reads_payload(m, payload_path) for m in conversation_messages):
        return False, "not_read"
    if not final_report.strip():
        return False, "empty_report"
    return True, "ok"


def _last_stop_reason(messages: list[Message]) -> StopReason | None:
    for message in reversed(messages):
        if message.stop_reason is not None:
            return message.stop_reason
    return None


def _reads_payload(message: Message, payload_path: Path) -> bool:
    """Whether one of the message's tool calls names the payload (by variable or file)."""
    markers = (PAYLOAD_VARIABLE, payload_path.name)
    return any(marker in call.arguments for call in message.tool_calls for marker in markers)
