"""Per-conversation reflection state: the watermark and the step counters.

``<conversation dir>/reflection-state.json`` says how far reflection has read the
conversation's ``messages.jsonl`` (the watermark, a message id) and how many assistant
steps are still unreflected, which is what the ``step-count`` trigger compares. The file
is derivable from the log, so a missing or unreadable one is rebuilt (everything
unreflected) rather than failing a turn.

Only the daemon writes it — after each turn, and when a reflection's outcome consumed a
slice — but from several threads at once (turns of many conversations, the settling of
an answer): every read-modify-write holds ``reflection-state.lock`` and replaces the file
atomically, so no update is lost. The lock is held only to read and replace the small
file (the log is parsed under it only to rebuild a missing or outdated one): turns wait
for it, so an advance parses the log before it takes the lock. Readers that only look
(:func:`peek_state`) take no lock at all.

Older files are upgraded through the migration registry
(:mod:`shared.models.migrations`), whose ``reflection-state`` steps are registered here; a
file from a newer agentd is refused (:class:`~shared.errors.StateFileTooNew`), never
rebuilt over.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import structlog
from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeInt,
    TypeAdapter,
    ValidationError,
    computed_field,
)

from shared.clock import Clock, utc_now
from shared.errors import CorruptStateFile, ReflectionError, StateFileTooNew
from shared.models.migrations import current_version, migrate, migration, stored_version
from shared.reflection.slices import Slice, count_steps, find_anchor, read_rows, select_rows
from shared.store.atomic import write_bytes_atomic
from shared.store.layout import ConversationFiles
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)


@migration("reflection-state")
def v1_to_v2_count_assistant_steps(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """v1 (no ``schema_version``) counted user turns since the last reflection
    (``turns_since``) and named the watermark ``reflected_through_message_id``.

    Turns cannot be converted into assistant steps, so both counters are recounted from
    the log: total = every step, reflected = the steps up to and including the
    watermark's message (0 when it is not in the log). The timestamps are kept.
    """
    rows = read_rows(ConversationFiles(path.parent).messages)
    watermark = raw.get("reflected_through_message_id")
    anchor = find_anchor(rows, watermark if isinstance(watermark, str) else None)
    return {
        "schema_version": 2,
        "watermark": watermark,
        "total_completed_steps": count_steps(rows),
        "reflected_completed_steps": count_steps(rows[: anchor + 1]),
        "last_reflection_started_at": raw.get("last_reflection_started_at"),
        "last_reflection_succeeded_at": raw.get("last_reflection_succeeded_at"),
    }


STATE_SCHEMA_VERSION = current_version("reflection-state")


class TranscriptState(BaseModel):
    """How far reflection has read one conversation."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = STATE_SCHEMA_VERSION
    watermark: str | None = None
    """Id of the last message a consumed reflection read; None: nothing reflected yet."""
    total_completed_steps: NonNegativeInt = 0
    """Assistant messages (kind ``message``) ever completed in this conversation."""
    reflected_completed_steps: NonNegativeInt = 0
    """Of those, the ones at or before the last consumed snapshot boundary."""
    last_reflection_started_at: datetime | None = None
    last_reflection_succeeded_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form; mypy reads no decorator over a property
    @property
    def steps_since_last_reflection(self) -> int:
        return max(0, self.total_completed_steps - self.reflected_completed_steps)


_TIME = TypeAdapter(datetime)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _time(value: object) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return _TIME.validate_python(value)
    except ValidationError:
        return None


def _normalised(raw: dict[str, Any]) -> TranscriptState:
    """The state ``raw`` describes: counters non-negative with reflected ≤ total, and
    empty or malformed optional fields dropped."""
    total = _count(raw.get("total_completed_steps"))
    watermark = raw.get("watermark")
    return TranscriptState(
        watermark=watermark if isinstance(watermark, str) and watermark else None,
        total_completed_steps=total,
        reflected_completed_steps=min(_count(raw.get("reflected_completed_steps")), total),
        last_reflection_started_at=_time(raw.get("last_reflection_started_at")),
        last_reflection_succeeded_at=_time(raw.get("last_reflection_succeeded_at")),
    )


def _encode(state: TranscriptState) -> bytes:
    return state.model_dump_json(indent=2).encode() + b"\n"


class _Stored(NamedTuple):
    raw: dict[str, Any]
    """The stored dict, upgraded to the current version."""
    migrated: bool
    """It was older: the upgrade recounted the steps from the log as it is now."""


def _stored(path: Path, data: bytes) -> _Stored | None:
    """The stored dict upgraded to the current version; None (with a warning) if it is
    not JSON of a version. Raises :class:`StateFileTooNew` for a newer agentd's file."""
    try:
        raw = json.loads(data)
    except ValueError:
        log.warning("reflection_state_rebuilt", path=str(path), reason="not valid JSON")
        return None
    if not isinstance(raw, dict):
        log.warning("reflection_state_rebuilt", path=str(path), reason="not a JSON object")
        return None
    try:
        older = stored_version(raw, path) < STATE_SCHEMA_VERSION
        return _Stored(migrate("reflection-state", raw, path), older)
    except StateFileTooNew:
        raise
    except CorruptStateFile:
        reason = f"schema {raw.get('schema_version')!r}"
        log.warning("reflection_state_rebuilt", path=str(path), reason=reason)
        return None


def _load_locked(directory: Path) -> tuple[TranscriptState, bool]:
    """The state (written back if it was rebuilt, migrated or normalised), and whether it
    was derived from the log just now, in which case it already counts every logged step."""
    path = ConversationFiles(directory).reflection_state
    log_path = ConversationFiles(directory).messages
    try:
        data: bytes | None = path.read_bytes()
    except FileNotFoundError:
        data = None
    stored = None if data is None else _stored(path, data)
    if stored is None:
        state = TranscriptState(total_completed_steps=count_steps(read_rows(log_path)))
        derived = True
    else:
        state, derived = _normalised(stored.raw), stored.migrated
    encoded = _encode(state)
    if encoded != data:
        write_bytes_atomic(path, encoded)
    return state, derived


def _save(directory: Path, state: TranscriptState) -> TranscriptState:
    write_bytes_atomic(ConversationFiles(directory).reflection_state, _encode(state))
    return state


def _locked(directory: Path) -> contextlib.AbstractContextManager[None]:
    return file_lock(ConversationFiles(directory).reflection_state_lock)


def load_state(directory: Path) -> TranscriptState:
    """The conversation's state; a missing or unreadable file is rebuilt from the log
    (every assistant step unreflected) and written."""
    with _locked(directory):
        return _load_locked(directory)[0]


def record_turn(directory: Path, assistant_steps: int) -> TranscriptState:
    """Count a completed turn's assistant steps (call after its messages are logged).

    A step is every assistant message of kind ``message``, tool-call-only ones included
    (mini-letta's rule): the log is the transcript, and it has no separate tool-call rows
    that a text-only rule could tell apart. When the state had to be derived from the log
    (first turn, unreadable file, migration), the log already holds this turn's steps,
    so they are not added twice.
    """
    if assistant_steps < 0:
        raise ValueError(f"assistant_steps must be >= 0, not {assistant_steps}")
    with _locked(directory):
        state, derived = _load_locked(directory)
        if derived:
            return state
        total = state.total_completed_steps + assistant_steps
        return _save(directory, state.model_copy(update={"total_completed_steps": total}))


def mark_started(directory: Path, at: datetime) -> TranscriptState:
    """Record that a payload was built for a reflection starting ``at``."""
    with _locked(directory):
        state, _ = _load_locked(directory)
        return _save(directory, state.model_copy(update={"last_reflection_started_at": at}))


def peek_state(directory: Path) -> TranscriptState:
    """The state as stored, read without the lock: for looking (``status``, the sweep),
    never for a read-modify-write. The file is replaced atomically, so this sees a whole
    one; a missing, damaged or older one is loaded as :func:`load_state` does."""
    try:
        raw = json.loads(ConversationFiles(directory).reflection_state.read_bytes())
    except (FileNotFoundError, ValueError):
        return load_state(directory)
    if isinstance(raw, dict) and raw.get("schema_version") == STATE_SCHEMA_VERSION:
        return _normalised(raw)
    return load_state(directory)


class _Advance(NamedTuple):
    """Where a consumed slice moves the watermark, as selected against one watermark."""

    watermark: str
    reflected_steps: int
    """Steps in the log up to the slice's snapshot boundary."""


def _plan_advance(directory: Path, slice: Slice, watermark: str | None) -> _Advance | None:
    """Re-run selection on the log up to the slice's snapshot boundary from ``watermark``;
    None when the slice moves nothing (the watermark has passed the snapshot already, or
    nothing eligible is left before it)."""
    rows = read_rows(ConversationFiles(directory).messages)
    prefix = [row for row in rows if row.end <= slice.end_offset]
    if find_anchor(prefix, watermark) < 0 and find_anchor(rows, watermark) >= 0:
        return None
    selected = select_rows(prefix, watermark)
    if selected is None:
        return None
    if selected.conversation_id != slice.conversation_id:
        raise ReflectionError(
            f"slice of conversation {slice.conversation_id} cannot advance the "
            f"watermark of {directory}"
        )
    return _Advance(selected.end_id, count_steps(prefix))


def advance(directory: Path, slice: Slice, *, clock: Clock = utc_now) -> TranscriptState:
    """Move the watermark over a consumed ``slice`` (merged or no_changes only).

    Selection is re-run on the log up to the slice's snapshot boundary with the current
    watermark, so steps logged while the reflection ran stay unreflected and finishing
    the same job twice changes nothing. A replay slice never moves the watermark, nor
    does a slice the watermark has already passed.

    The log is read outside the lock (it is append-only; at 100,000 messages that takes
    over a second, and the daemon counts every turn under this lock): the lock is held
    only for a compare-and-set. If the watermark is still the one the selection started
    from, the new one is written, with the step counters of the state as it is then (a
    turn counted meanwhile only added steps); if another advance moved it, selection runs
    again from the new one.
    """
    if slice.mode == "replay":
        return load_state(directory)
    while True:
        seen = load_state(directory).watermark
        planned = _plan_advance(directory, slice, seen)
        with _locked(directory):
            state, _ = _load_locked(directory)
            if state.watermark != seen:
                continue
            if planned is None:
                return state
            update = {
                "watermark": planned.watermark,
                "reflected_completed_steps": min(
                    planned.reflected_steps, state.total_completed_steps
                ),
                "last_reflection_succeeded_at": clock(),
            }
            return _save(directory, state.model_copy(update=update))
