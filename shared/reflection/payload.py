"""Payloads: slices written out for the reflection sub-agent, in parts it can read whole.

The sub-agent reads a slice as "trajectory" records (pretty-printed JSON arrays). What a
tool shows a model is capped — bash keeps the head and tail of 30,000 characters, the
loop caps a result to a share of the window — so a file larger than that is read with a
hole in the middle that nobody notices, and its facts would be marked reflected unread.
So a job shows at most a budget of characters (the rest of the slice waits for the next
job), written in parts that each fit in one tool result: one part alone is what
``TRANSCRIPT_PATH`` names, several are listed by a manifest. Each part opens with a meta
record holding a random nonce, and the payload remembers every eligible message as it
was written, so the harness can tell afterwards which messages the sub-agent's tools
actually showed it (:mod:`shared.reflection.coverage`).

Payload files are written atomically and never deleted: they are the record of what a
reflection was shown.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel

from shared.agent.request import tool_result_cap
from shared.agent.tools.view import transcripts_name
from shared.clock import Clock, utc_now
from shared.models.messages import AssistantMessage, Message, ToolCall, ToolResult
from shared.reflection.slices import LogRow, Slice, ending_at, is_eligible, is_step, rows_of
from shared.store.atomic import write_bytes_atomic

log = structlog.get_logger(__name__)

ARGS_LIMIT = 300
"""Characters of a tool call's arguments in a payload; the bounded text is still JSON."""
TOOL_RESULT_LIMIT = 2_500
"""Characters of a tool result in a payload; longer ones keep their head and tail."""
MAX_JOB_CHARS = 60_000
"""Most characters one job shows, whatever the window: a reflection that reads more at
once consolidates worse, and the remainder is simply the next job's slice."""
JOB_SHARE_OF_WINDOW = 0.35
"""Share of the sub-agent's window (at 4 characters a token) a job's parts may fill."""
PART_SHARE_OF_OUTPUT = 0.8
"""A part fills at most this share of the largest tool result, leaving room for the
bash tool's own notes (exit codes) around it."""
MIN_PART_CHARS = 2_000
RECORD_ROOM = 600
"""Characters of a part kept free for JSON around one record and the meta record."""
MANIFEST_TYPE = "multi_transcript_reflection_payload"
MANIFEST_SCHEMA_VERSION = 2

Record = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """How much one job shows its sub-agent, and in what pieces."""

    part_chars: int
    """Largest part, in characters: what one tool result shows whole."""
    budget_chars: int
    """All parts of a job together."""

    @classmethod
    def for_reader(cls, *, context_window: int, output_chars: int) -> Limits:
        """Limits for a sub-agent with this window whose bash shows ``output_chars``."""
        fits_one_result = min(output_chars, tool_result_cap(context_window))
        part = max(MIN_PART_CHARS, int(fits_one_result * PART_SHARE_OF_OUTPUT))
        window_chars = int(context_window * 4 * JOB_SHARE_OF_WINDOW)
        return cls(part_chars=part, budget_chars=max(part, min(MAX_JOB_CHARS, window_chars)))

    @property
    def record_chars(self) -> int:
        """Longest message text in a record, so that any single record fits in a part."""
        return max(200, self.part_chars - RECORD_ROOM)


class ShownMessage(BaseModel):
    """An eligible message as a part shows it: what proves it was read, and how far the
    slice reaches if the reading stops after it."""

    id: str
    role: Literal["user", "assistant"]
    text: str
    """Its content exactly as written into the part (bounded); empty for an assistant
    message that only called tools."""
    end_offset: int
    """Where its line ends in ``messages.jsonl``: a slice cut after it ends here."""
    messages_through: int
    """Log rows of the slice up to and including it."""
    steps_through: int
    """Assistant steps of the slice up to and including it."""


class SlicePayload(BaseModel):
    """One conversation's part of a payload."""

    slice: Slice
    """What was shown: the unreflected (or replay) slice, cut to the job's budget."""
    complete: bool
    """False when the budget cut the slice: more is unreflected after ``slice``."""
    parts: list[Path]
    nonces: list[str]
    """One random token per part, in its meta record: seen in a tool result, it proves
    the part was opened."""
    shown: list[ShownMessage]

    def through(self, message: ShownMessage) -> Slice:
        """The shown slice cut short to end at ``message``."""
        return self.slice.model_copy(
            update={
                "end_id": message.id,
                "end_offset": message.end_offset,
                "messages": message.messages_through,
                "assistant_steps": message.steps_through,
            }
        )


class PayloadFile(BaseModel):
    """What was written: ``path`` is what the sub-agent's ``TRANSCRIPT_PATH`` names."""

    path: Path
    slices: list[SlicePayload]
    """The slices the payload shows (a later one is left out when the budget is spent)."""
    is_manifest: bool

    @property
    def files(self) -> list[Path]:
        """Every file the sub-agent may read: the manifest (if any) and the parts."""
        parts = [part for shown in self.slices for part in shown.parts]
        return [self.path, *parts] if self.is_manifest else parts


# --- records ------------------------------------------------------------------------------


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


def message_records(message: Message, text_limit: int) -> list[Record]:
    """The trajectory records of one message; reminders, notes and stop records give none.

    Message and summary texts are bounded to ``text_limit``, tool results to 2,500
    characters and tool arguments to 300, so every record fits in a part."""
    at = _timestamp(message.created_at)
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


def _encode(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _size_in_array(record: Record) -> int:
    """Characters ``record`` adds to a pretty-printed array: its lines indented by two
    more spaces, plus the ``,\\n`` that separates it from the next."""
    text = json.dumps(record, indent=2, ensure_ascii=False)
    return len(text) + 2 * (text.count("\n") + 1) + 2


# --- one slice: cut to the budget, split into parts -----------------------------------------


@dataclass
class _Cut:
    """A slice cut to a budget: its rows' records and the messages they show."""

    slice: Slice
    complete: bool
    records: list[Record]
    sizes: list[int]
    shown: list[ShownMessage]


def _cut(log_path: Path, slice: Slice, budget_chars: int, text_limit: int) -> _Cut | None:
    """``slice`` up to the last eligible message whose records still fit the budget; the
    first eligible message is always shown. None when not even that fits."""
    rows = rows_of(log_path, slice)
    entries: list[tuple[LogRow, list[Record], int]] = []
    used = steps = 0
    last = -1
    shown: list[ShownMessage] = []
    for index, row in enumerate(rows):
        records = message_records(row.message, text_limit)
        used += sum(_size_in_array(record) for record in records)
        steps += is_step(row.message)
        if is_eligible(row.message):
            if used > budget_chars and last >= 0:
                break
            last = index
            text = next((r["content"] for r in records if r.get("content") is not None), "")
            shown.append(
                ShownMessage(
                    id=row.message.id,
                    role=row.message.role,  # type: ignore[arg-type]
                    text=text,
                    end_offset=row.end,
                    messages_through=index + 1,
                    steps_through=steps,
                )
            )
        entries.append((row, records, used))
    if last < 0:
        return None
    kept = entries[: last + 1]
    last_eligible = max(i for i, row in enumerate(rows) if is_eligible(row.message))
    return _Cut(
        slice=slice if last == last_eligible else ending_at(slice, rows, last),
        complete=last == last_eligible,
        records=[record for _, records, _ in kept for record in records],
        sizes=[_size_in_array(record) for _, records, _ in kept for record in records],
        shown=shown,
    )


def _split(records: list[Record], sizes: list[int], part_chars: int) -> list[list[Record]]:
    """Consecutive groups of records whose arrays (with a meta record) fit ``part_chars``."""
    room = part_chars - RECORD_ROOM
    parts: list[list[Record]] = [[]]
    used = 0
    for record, size in zip(records, sizes, strict=True):
        if parts[-1] and used + size > room:
            parts.append([])
            used = 0
        parts[-1].append(record)
        used += size
    return parts


def _meta(slice: Slice, part: int, parts: int, nonce: str) -> Record:
    return {
        "role": "meta",
        "source": "agentd",
        "conversation_id": slice.conversation_id,
        "part": part,
        "parts": parts,
        "nonce": nonce,
    }


# --- the payload -----------------------------------------------------------------------------


def write_payload(
    payload_dir: Path,
    agent_id: str,
    slices: list[tuple[Path, Slice]],
    *,
    limits: Limits,
    instruction: str | None = None,
    clock: Clock = utc_now,
) -> PayloadFile:
    """Write ``slices`` (each with its conversation's log) within ``limits``.

    A manifest names each part as the sub-agent will find it: under ``/transcript`` where
    its shell runs in bubblewrap, else at its host path (:func:`transcripts_name`).

    Slices share the budget in order: the first always shows at least its first
    eligible message, each later one shows what still fits, and one that does not fit
    at all is left out. One slice in one part is ``payload-<stamp>.json``, a JSON array;
    anything else is parts ``payload-<stamp>-<n>.json`` listed by a manifest at
    ``payload-<stamp>.json``.
    """
    if not slices:
        raise ValueError("a payload needs at least one slice")
    payload_dir.mkdir(parents=True, exist_ok=True)
    shown_dir = transcripts_name()
    now = clock()
    stamp = f"{now:%Y%m%d%H%M%S}-{secrets.token_hex(4)}"
    cuts: list[_Cut] = []
    remaining = limits.budget_chars
    for log_path, slice in slices:
        cut = _cut(log_path, slice, remaining, limits.record_chars)
        if cut is None or (cuts and sum(cut.sizes) > remaining):
            log.info(
                "payload_slice_left_out",
                conversation_id=slice.conversation_id,
                budget_left=remaining,
            )
            continue
        cuts.append(cut)
        remaining -= sum(cut.sizes)

    groups = [_split(cut.records, cut.sizes, limits.part_chars) for cut in cuts]
    single = len(cuts) == 1 and len(groups[0]) == 1
    shown: list[SlicePayload] = []
    entries: list[Record] = []
    number = 0
    for cut, parts in zip(cuts, groups, strict=True):
        paths, nonces = [], []
        for index, records in enumerate(parts, start=1):
            number += 1
            path = payload_dir / (
                f"payload-{stamp}.json" if single else f"payload-{stamp}-{number}.json"
            )
            nonce = secrets.token_hex(8)
            text = _encode([_meta(cut.slice, index, len(parts), nonce), *records])
            write_bytes_atomic(path, text.encode())
            paths.append(path)
            nonces.append(nonce)
            name = f"{shown_dir}/{path.name}" if shown_dir else str(path.absolute())
            entries.append(_manifest_entry(cut.slice, index, len(parts), name, records, text))
        shown.append(
            SlicePayload(
                slice=cut.slice, complete=cut.complete, parts=paths, nonces=nonces, shown=cut.shown
            )
        )
    if single:
        return PayloadFile(path=shown[0].parts[0], slices=shown, is_manifest=False)
    manifest: Record = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "type": MANIFEST_TYPE,
        "agent_id": agent_id,
        "created_at": _timestamp(now),
    }
    if instruction:
        manifest["user_instruction"] = instruction
    manifest["transcripts"] = entries
    path = payload_dir / f"payload-{stamp}.json"
    write_bytes_atomic(path, _encode(manifest).encode())
    return PayloadFile(path=path, slices=shown, is_manifest=True)


def _manifest_entry(
    slice: Slice, part: int, parts: int, path: str, records: list[Record], text: str
) -> Record:
    ids = [record["id"] for record in records if record.get("role") in ("user", "assistant")]
    return {
        "conversation_id": slice.conversation_id,
        "mode": slice.mode,
        "part": part,
        "parts": parts,
        "payload_path": path,
        "first_message_id": ids[0] if ids else None,
        "last_message_id": ids[-1] if ids else None,
        "records": len(records),
        "approx_chars": len(text),
    }
