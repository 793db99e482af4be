"""The persisted index's manifest: which segment files are live, in order, and what of
each conversation's log each one covers.

Segment files are immutable; the manifest is the one thing replaced to change the index
(a segment added, eight merged into one), atomically and with the directory synced, so a
crash leaves either the old list or the new one. A file the manifest does not name is a
leftover (a write or merge cut short) and is removed at the next start.

Documents are numbered by their position in the list at start: a segment's documents
follow the previous segment's. For each conversation a segment holds documents of, it
records the byte offsets of the first and last of their lines: a conversation's
documents enter the index in log order, so a segment holds exactly the conversation's
documents between those two offsets. What the live segments do not cover (a gap left by
a segment found unusable or never written, the tail written since) is read again from
the log; only segments that follow one another with no gap between them are merged.
"""

from __future__ import annotations

from pathlib import Path

import structlog
from pydantic import BaseModel, Field

from shared.errors import AgentdError
from shared.recall.disk import FORMAT_VERSION, sync_directory
from shared.store.atomic import read_model, write_model_atomic

log = structlog.get_logger(__name__)


class SegmentEntry(BaseModel):
    serial: int = Field(ge=0)
    """Names the file (see :meth:`RecallFiles.segment`)."""
    documents: int = Field(gt=0)
    body_crc32: int
    """The body checksum its header holds: ties the entry to the very file written."""
    covers: dict[str, tuple[int, int, str]]
    """Conversation id → byte offsets of the first and the last of its documents' lines,
    and the last one's message id (what the log must still hold there)."""
    follows: bool = False
    """Its documents directly follow the previous entry's: no segment between them was
    left unwritten (a write that failed) or dropped (found unusable), so the two may be
    merged. A merged segment covers each conversation from its first document to its
    last, so merging across a segment that is not on disk would claim that segment's
    lines, and a start would never read them again. False when not known (a manifest
    written before this field): such segments are never merged, nothing is lost."""


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    analyzer_version: int
    conversations: list[str] = []
    """Conversation numbers (the segments' conversation column) → ids; only ever grows."""
    segments: list[SegmentEntry] = []
    next_serial: int = 0


def read_manifest(path: Path) -> Manifest | None:
    """The manifest, or None when there is none or it cannot be read (then the index is
    rebuilt from the logs: nothing it describes is lost)."""
    try:
        return read_model(path, Manifest)
    except AgentdError as exc:
        log.warning("recall_manifest_unreadable", path=str(path), error=exc.message)
        return None


def write_manifest(path: Path, manifest: Manifest) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_model_atomic(path, manifest)
    sync_directory(path.parent)
