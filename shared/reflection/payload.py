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

A line of the log that is not a message (damaged, or written by another program) is shown
too, as an ``unreadable`` record holding its text as found: the watermark moves past it
only once a reflection has read it (:mod:`shared.reflection.slices`).

Payload files are written atomically and never deleted: they are the record of what a
reflection was shown.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel

from shared.agent.request import tool_result_cap
from shared.agent.tools.view import transcripts_name
from shared.clock import Clock, utc_now
from shared.reflection.records import Record, message_records, timestamp, unreadable_record
from shared.reflection.slices import BrokenLine, Slice, is_eligible, is_step, lines_of
from shared.store.atomic import write_bytes_atomic

log = structlog.get_logger(__name__)

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
    """An eligible message (or a line that is not a message) as a part shows it: what
    proves it was read, and how far the slice reaches if the reading stops after it."""

    id: str
    """The message's id; for an ``unreadable`` line, ``line-<number>``."""
    role: Literal["user", "assistant", "unreadable"]
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
        """The shown slice cut short to end at ``message``, an eligible one."""
        return _cut_at(self.slice, message)


def _cut_at(slice: Slice, message: ShownMessage) -> Slice:
    """``slice`` ending at ``message`` instead (a line that is not a message never ends one)."""
    if message.role == "unreadable":
        raise ValueError(f"{message.id} is not a message: a slice cannot end at it")
    return slice.model_copy(
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

    def relocated(self, directory: Path) -> PayloadFile:
        """The same payload with its files in ``directory`` (a worker's copy of them)."""
        return self.model_copy(
            update={
                "path": directory / self.path.name,
                "slices": [
                    shown.model_copy(update={"parts": [directory / p.name for p in shown.parts]})
                    for shown in self.slices
                ],
            }
        )


def relocate_manifest(text: str, directory: str) -> str:
    """A manifest that names its parts in ``directory`` instead (where a worker's
    sub-agent finds them: ``/transcript`` in bubblewrap, else their path on its host)."""
    manifest = json.loads(text)
    for entry in manifest.get("transcripts", []):
        name = Path(str(entry.get("payload_path", ""))).name
        entry["payload_path"] = f"{directory.rstrip('/')}/{name}"
    return _encode(manifest)


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
    entries: list[tuple[list[Record], ShownMessage | None]] = []
    used = steps = messages = 0
    last = -1
    last_shown: ShownMessage | None = None
    for index, found in enumerate(lines_of(log_path, slice)):
        if isinstance(found, BrokenLine):
            record = unreadable_record(found, text_limit)
            used += _size_in_array(record)
            entries.append(([record], _shown(record, found.end, messages, steps)))
            continue
        records = message_records(found.message, text_limit)
        used += sum(_size_in_array(record) for record in records)
        steps += is_step(found.message)
        messages += 1
        shown = None
        if is_eligible(found.message):
            if used > budget_chars and last >= 0:
                break
            text = next((r["content"] for r in records if r.get("content") is not None), "")
            shown = ShownMessage(
                id=found.message.id,
                # is_eligible let only a user's or an assistant's message through
                role=found.message.role,  # type: ignore[arg-type]
                text=text,
                end_offset=found.end,
                messages_through=messages,
                steps_through=steps,
            )
            last, last_shown = index, shown
        entries.append((records, shown))
    if last_shown is None:
        return None
    kept = entries[: last + 1]
    complete = last_shown.end_offset == slice.end_offset
    return _Cut(
        slice=slice if complete else _cut_at(slice, last_shown),
        complete=complete,
        records=[record for records, _ in kept for record in records],
        sizes=[_size_in_array(record) for records, _ in kept for record in records],
        shown=[shown for _, shown in kept if shown is not None],
    )


def _shown(record: Record, end_offset: int, messages: int, steps: int) -> ShownMessage:
    """A shown line that is not a message: it must be read, and never ends a slice."""
    return ShownMessage(
        id=record["id"],
        role="unreadable",
        text=record["content"],
        end_offset=end_offset,
        messages_through=messages,
        steps_through=steps,
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
        "created_at": timestamp(now),
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
