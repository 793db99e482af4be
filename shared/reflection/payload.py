"""Payload slices: which part of ``messages.jsonl`` a reflection reads, and the files it reads.

The conversation log is the transcript (there is no second copy), so a slice is a byte
range of ``messages.jsonl``: it starts after the watermark's message and ends just after
the last user or assistant message, whose end offset is the snapshot boundary. Messages
appended while a reflection runs lie past that boundary and are left for the next one.

Only ordinary user and assistant messages are *eligible*: they start and end slices and
their ids become watermarks. Tool results and harness messages (summaries, reminders,
notes, stop records) ride inside a slice but never bound it.

A payload is what the reflection sub-agent reads: the slice as "trajectory" records (a
pretty-printed JSON array), or for several conversations one such file per slice plus a
manifest. Payload files are written atomically and never deleted: they are the record of
what a reflection was shown.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ValidationError

from shared.clock import Clock, utc_now
from shared.models.messages import Message, ToolCall
from shared.store.atomic import write_bytes_atomic

log = structlog.get_logger(__name__)

ARGS_LIMIT = 300
"""Characters of a tool call's arguments in a payload; the bounded text is still JSON."""
TOOL_RESULT_LIMIT = 2_500
"""Characters of a tool result in a payload; longer ones keep their head and tail."""
REPLAY_USER_TURNS = 50
"""User turns a replay slice reaches back over."""
DEFAULT_BUDGET_CHARS = 150_000
"""Characters all slices of a multi-conversation payload may use together."""
MANIFEST_TYPE = "multi_transcript_reflection_payload"

SliceMode = Literal["unreflected", "replay"]
Record = dict[str, Any]


@dataclass(frozen=True)
class LogRow:
    """One complete line of the log: the message and the bytes ``[start, end)`` it spans."""

    message: Message
    start: int
    end: int


def read_rows(log_path: Path, until_offset: int | None = None) -> list[LogRow]:
    """Every readable message of the log that ends at or before ``until_offset``.

    A torn last line (no newline yet) and lines that do not parse are skipped, as the
    log's own reader does.
    """
    try:
        with open(log_path, "rb") as handle:
            data = handle.read() if until_offset is None else handle.read(until_offset)
    except FileNotFoundError:
        return []
    rows: list[LogRow] = []
    start = 0
    while (newline := data.find(b"\n", start)) >= 0:
        line = data[start:newline]
        if line.strip():
            try:
                rows.append(LogRow(Message.model_validate_json(line), start, newline + 1))
            except ValidationError:
                log.warning("unreadable_message_line", path=str(log_path), offset=start)
        start = newline + 1
    return rows


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
    """Where the slice's first line starts in ``messages.jsonl``."""
    end_offset: int
    """Just after the end message's line: the exclusive snapshot boundary."""
    messages: int
    """Log lines in the slice, of every kind."""
    assistant_steps: int


def _make_slice(rows: list[LogRow], first: int, start: int, end: int, mode: SliceMode) -> Slice:
    span = rows[first : end + 1]
    return Slice(
        conversation_id=rows[start].message.conversation_id,
        mode=mode,
        start_id=rows[start].message.id,
        end_id=rows[end].message.id,
        start_offset=rows[first].start,
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
    return _make_slice(rows, anchor + 1, eligible[0], eligible[-1], "unreflected")


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
    return _make_slice(rows, start, start, end, "replay")


def _timestamp(at: datetime) -> str:
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


def _message_records(message: Message) -> list[Record]:
    """The trajectory records of one message; reminders, notes and stop records give none."""
    at = _timestamp(message.created_at)
    if message.kind == "summary":
        return [{"role": "summary", "content": message.content, "timestamp": at, "id": message.id}]
    if message.kind != "message":
        return []
    if message.role == "tool":
        return [
            {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": bounded_text(message.content),
                "ok": not message.is_error,
                "timestamp": at,
                "id": message.id,
            }
        ]
    records: list[Record] = []
    if message.content or not message.tool_calls:
        records.append(
            {"role": message.role, "content": message.content, "timestamp": at, "id": message.id}
        )
    if message.tool_calls:
        records.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call_record(call) for call in message.tool_calls],
                "timestamp": at,
                "id": message.id,
            }
        )
    return records


def slice_records(log_path: Path, slice: Slice) -> list[Record]:
    """The slice as trajectory records, opened by a ``meta`` record naming the conversation."""
    records: list[Record] = [
        {"role": "meta", "source": "agentd", "conversation_id": slice.conversation_id}
    ]
    for row in read_rows(log_path, slice.end_offset):
        if row.start >= slice.start_offset:
            records.extend(_message_records(row.message))
    return records


class PayloadFile(BaseModel):
    """What was written: ``path`` is what the sub-agent's ``TRANSCRIPT_PATH`` names."""

    path: Path
    slices: list[Slice]
    """The slices the payload holds (a multi payload may have skipped some for budget)."""
    is_manifest: bool


def _encode(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _nonce(now: datetime) -> str:
    return f"{now:%Y%m%d%H%M%S}-{secrets.token_hex(4)}"


def write_payload(
    payload_dir: Path,
    agent_id: str,
    slices: list[tuple[Slice, list[Record]]],
    *,
    instruction: str | None = None,
    budget_chars: int = DEFAULT_BUDGET_CHARS,
    clock: Clock = utc_now,
) -> PayloadFile:
    """Write one slice as ``payload-<nonce>.json``, or several as files plus a manifest.

    For several slices the manifest is ``payload-<nonce>.json`` and slice ``n`` is
    ``payload-<nonce>-<n>.json``. Slices share ``budget_chars``: the first is always
    kept, a later one that would overflow is skipped, and smaller ones after it may fit.
    """
    if not slices:
        raise ValueError("a payload needs at least one slice")
    payload_dir.mkdir(parents=True, exist_ok=True)
    now = clock()
    nonce = _nonce(now)
    path = payload_dir / f"payload-{nonce}.json"
    if len(slices) == 1:
        only, records = slices[0]
        write_bytes_atomic(path, _encode(records).encode())
        return PayloadFile(path=path, slices=[only], is_manifest=False)

    kept: list[Slice] = []
    transcripts: list[Record] = []
    used = 0
    for slice_, records in slices:
        text = _encode(records)
        if kept and used + len(text) > budget_chars:
            log.info(
                "payload_slice_skipped",
                conversation_id=slice_.conversation_id,
                chars=len(text),
                used=used,
                budget=budget_chars,
            )
            continue
        used += len(text)
        slice_path = payload_dir / f"payload-{nonce}-{len(kept) + 1}.json"
        write_bytes_atomic(slice_path, text.encode())
        kept.append(slice_)
        transcripts.append(
            {
                "conversation_id": slice_.conversation_id,
                "mode": slice_.mode,
                "payload_path": str(slice_path),
                "start_message_id": slice_.start_id,
                "end_message_id": slice_.end_id,
                "end_offset": slice_.end_offset,
                "messages": slice_.messages,
                "approx_chars": len(text),
            }
        )
    manifest: Record = {
        "schema_version": 1,
        "type": MANIFEST_TYPE,
        "agent_id": agent_id,
        "created_at": _timestamp(now),
    }
    if instruction:
        manifest["user_instruction"] = instruction
    manifest["transcripts"] = transcripts
    write_bytes_atomic(path, _encode(manifest).encode())
    return PayloadFile(path=path, slices=kept, is_manifest=True)
