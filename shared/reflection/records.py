"""Trajectory records: what a payload shows of each line of a conversation's log.

Apart from :mod:`shared.reflection.payload` (which cuts slices to a budget and writes
them in parts) because a record's shape is a contract of its own: the reflection prompt
describes it, and every record must fit a part, so each text in it is bounded here —
message and summary texts to the caller's limit, tool results to 2,500 characters, tool
arguments to 300 (still valid JSON). A line of the log that is not a message is shown as
an ``unreadable`` record holding its text as found.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from shared.models.messages import AssistantMessage, Message, ToolCall, ToolResult
from shared.reflection.slices import BrokenLine

ARGS_LIMIT = 300
"""Characters of a tool call's arguments in a payload; the bounded text is still JSON."""
TOOL_RESULT_LIMIT = 2_500
"""Characters of a tool result in a payload; longer ones keep their head and tail."""

Record = dict[str, Any]


def timestamp(at: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and ``Z`` (a naive time is taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def bounded_args(raw: str) -> str:
    """Tool-call arguments as JSON text of at most 300 characters.

    Valid arguments that fit are kept verbatim; anything else becomes a small JSON object
    with a note and as much of the raw text as fits, so the payload stays parseable.
    """
    raw = raw or "{}"
    valid = _is_json(raw)
    if valid and len(raw) <= ARGS_LIMIT:
        return raw
    note = f"{'truncated' if valid else 'not valid JSON'}, {len(raw)} chars"
    keep = ARGS_LIMIT
    while True:
        text = json.dumps({"_note": note, "_preview": raw[:keep]}, ensure_ascii=False)
        if len(text) <= ARGS_LIMIT:
            return text
        keep = max(0, keep - (len(text) - ARGS_LIMIT))


def _omission_marker(omitted: int) -> str:
    return f"\n[… {omitted} chars omitted …]\n"


def bounded_text(text: str, limit: int = TOOL_RESULT_LIMIT) -> str:
    """``text`` if it fits, else exactly ``limit`` chars: head, an omission marker, tail."""
    if len(text) <= limit:
        return text
    omitted = len(text) - limit
    while True:
        marker = _omission_marker(omitted)
        room = limit - len(marker)
        if len(text) - room == omitted:
            break
        omitted = len(text) - room
    tail = room // 2
    return text[: room - tail] + marker + text[len(text) - tail :]


def _call_record(call: ToolCall) -> Record:
    return {"id": call.id, "name": call.name, "args": bounded_args(call.arguments)}


def message_records(message: Message, text_limit: int) -> list[Record]:
    """The trajectory records of one message; reminders, notes and stop records give none.

    Message and summary texts are bounded to ``text_limit``, tool results to 2,500
    characters and tool arguments to 300, so every record fits in a part."""
    at = timestamp(message.created_at)
    if message.kind == "summary":
        content = bounded_text(message.content, text_limit)
        return [{"role": "summary", "content": content, "timestamp": at, "id": message.id}]
    if message.kind != "message":
        return []
    if isinstance(message, ToolResult):
        return [
            {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": bounded_text(message.content, min(TOOL_RESULT_LIMIT, text_limit)),
                "ok": not message.is_error,
                "timestamp": at,
                "id": message.id,
            }
        ]
    records: list[Record] = []
    calls = message.tool_calls if isinstance(message, AssistantMessage) else []
    if message.content or not calls:
        content = bounded_text(message.content, text_limit)
        records.append(
            {"role": message.role, "content": content, "timestamp": at, "id": message.id}
        )
    if calls:
        records.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call_record(call) for call in calls],
                "timestamp": at,
                "id": message.id,
            }
        )
    return records


UNREADABLE_NOTE = (
    "a line of the conversation's log that is not a message (damaged, or written by "
    "another program), shown as found"
)


def unreadable_record(line: BrokenLine, text_limit: int) -> Record:
    """The record of a log line that is not a message: its text, bounded, and where it is."""
    return {
        "role": "unreadable",
        "content": bounded_text(line.text, text_limit),
        "line": line.line,
        "note": UNREADABLE_NOTE,
        "id": f"line-{line.line}",
    }
