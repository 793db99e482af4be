"""Slices: which part of a conversation's ``messages.jsonl`` a reflection reads.

The conversation log is the transcript (there is no second copy), so a slice is a byte
range of ``messages.jsonl``: it starts after the watermark's message and ends just after
the last user or assistant message, whose end offset is the snapshot boundary. Messages
appended while a reflection runs lie past that boundary and are left for the next one.

Only ordinary user and assistant messages are *eligible*: they start and end slices and
their ids become watermarks. Tool results and harness messages (summaries, reminders,
notes, stop records) ride inside a slice but never bound it.

A complete line that is not a message (damaged, or written by another program: a
:class:`BrokenLine`) has no id and can never be a watermark, but it may hold what the user
said, so the watermark must not pass it unseen. A slice covers every byte from just after
its watermark to its end, broken lines included; the payload shows them as they are
(:mod:`shared.reflection.payload`), and a reflection consumes a slice only up to the
first one it did not read, as for a user message (:mod:`shared.reflection.coverage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ValidationError

from shared.models.messages import Message

log = structlog.get_logger(__name__)

REPLAY_USER_TURNS = 50
"""User turns a replay slice reaches back over."""

SliceMode = Literal["unreflected", "replay"]


@dataclass(frozen=True)
class LogRow:
    """One complete line of the log: the message and the bytes ``[start, end)`` it spans."""

    message: Message
    start: int
    end: int


@dataclass(frozen=True)
class BrokenLine:
    """A complete line of the log that is not a message, as found."""

    text: str
    """The line without its newline (bytes that are not UTF-8 replaced)."""
    line: int
    """Its line number in the file, from 1."""
    start: int
    end: int


def read_lines(log_path: Path, until_offset: int | None = None) -> list[LogRow | BrokenLine]:
    """Every complete, non-blank line of the log that ends at or before ``until_offset``:
    a message, or a :class:`BrokenLine`. A torn last line (no newline yet) is left out."""
    try:
        with open(log_path, "rb") as handle:
            data = handle.read() if until_offset is None else handle.read(until_offset)
    except FileNotFoundError:
        return []
    lines: list[LogRow | BrokenLine] = []
    start = number = 0
    while (newline := data.find(b"\n", start)) >= 0:
        number += 1
        line = data[start:newline]
        if line.strip():
            try:
                lines.append(LogRow(Message.parse_line(line), start, newline + 1))
            except ValidationError:
                text = line.decode(errors="replace")
                lines.append(BrokenLine(text, number, start, newline + 1))
        start = newline + 1
    return lines


def read_rows(log_path: Path, until_offset: int | None = None) -> list[LogRow]:
    """The messages among :func:`read_lines`; a line that is not one is logged."""
    rows = []
    for found in read_lines(log_path, until_offset):
        if isinstance(found, BrokenLine):
            log.warning("unreadable_message_line", path=str(log_path), line=found.line)
        else:
            rows.append(found)
    return rows


def broken_lines(log_path: Path) -> list[BrokenLine]:
    """The lines of the log that are not messages (what ``agentd doctor`` names)."""
    return [found for found in read_lines(log_path) if isinstance(found, BrokenLine)]


def is_eligible(message: Message) -> bool:
    """May this message start or end a slice (and become a watermark)?"""
    return message.kind == "message" and message.role in ("user", "assistant")


def is_step(message: Message) -> bool:
    """Does this message count as a completed assistant step?"""
    return message.kind == "message" and message.role == "assistant"


def count_steps(rows: list[LogRow]) -> int:
    return sum(1 for row in rows if is_step(row.message))


def find_anchor(rows: list[LogRow], watermark: str | None) -> int:
    """Index of the eligible row whose id is ``watermark``; -1 when unset or not found."""
    if watermark:
        for index, row in enumerate(rows):
            if row.message.id == watermark and is_eligible(row.message):
                return index
    return -1


class Slice(BaseModel):
    """A byte range of one conversation's log, bounded by eligible messages."""

    conversation_id: str
    mode: SliceMode
    start_id: str
    """The first eligible message (a tool result or summary before it is still included)."""
    end_id: str
    """The last eligible message: the watermark once this slice is consumed."""
    start_offset: int
    """Where the slice starts in ``messages.jsonl``: just after the watermark's line (or at
    the start of the file), so that no line between them is left out."""
    end_offset: int
    """Just after the end message's line: the exclusive snapshot boundary."""
    messages: int
    """Messages in the slice, of every kind."""
    assistant_steps: int


def _make_slice(
    rows: list[LogRow], first: int, start: int, end: int, mode: SliceMode, start_offset: int
) -> Slice:
    span = rows[first : end + 1]
    return Slice(
        conversation_id=rows[start].message.conversation_id,
        mode=mode,
        start_id=rows[start].message.id,
        end_id=rows[end].message.id,
        start_offset=start_offset,
        end_offset=rows[end].end,
        messages=len(span),
        assistant_steps=count_steps(span),
    )


def select_rows(rows: list[LogRow], watermark: str | None) -> Slice | None:
    """The unreflected slice of ``rows`` after ``watermark``; None when nothing is eligible.

    A watermark that is not in the rows gives no anchor: the slice starts at the
    beginning and everything is reflected again.
    """
    anchor = find_anchor(rows, watermark)
    eligible = [i for i in range(anchor + 1, len(rows)) if is_eligible(rows[i].message)]
    if not eligible:
        return None
    after_watermark = rows[anchor].end if anchor >= 0 else 0
    return _make_slice(rows, anchor + 1, eligible[0], eligible[-1], "unreflected", after_watermark)


def select_slice(
    log_path: Path, watermark: str | None, *, until_offset: int | None = None
) -> Slice | None:
    """The unreflected slice of the log (or of its first ``until_offset`` bytes)."""
    return select_rows(read_rows(log_path, until_offset), watermark)


def replay_slice(log_path: Path) -> Slice | None:
    """The last ≤ 50 user turns up to the last eligible message, to be read again.

    Used in multi-conversation payloads for a conversation with nothing unreflected;
    a replay slice never moves a watermark.
    """
    rows = read_rows(log_path)
    eligible = [i for i, row in enumerate(rows) if is_eligible(row.message)]
    if not eligible:
        return None
    end = eligible[-1]
    users = [i for i in eligible if rows[i].message.role == "user"]
    start = users[-REPLAY_USER_TURNS:][0] if users else eligible[0]
    return _make_slice(rows, start, start, end, "replay", rows[start].start)


def lines_of(log_path: Path, slice: Slice) -> list[LogRow | BrokenLine]:
    """The lines ``slice`` spans, oldest first, broken ones included."""
    lines = read_lines(log_path, slice.end_offset)
    return [found for found in lines if found.start >= slice.start_offset]
