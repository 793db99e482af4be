"""One agent's index on disk: opening what was persisted, writing what is frozen, merging.

Opening (:meth:`PersistedIndex.load`) maps every usable segment the manifest names and
checks, cheaply, that the logs still hold what they cover: a segment is left out when its
file is missing or its header is damaged, of another format or of another analyzer, and
every segment covering a conversation whose log is gone, shorter than what was indexed,
or holds another message where the last indexed one was (replaced). What the remaining
segments do not cover is returned as ranges of log offsets for the caller to read again:
the logs are the truth, the index only a cache of them.

Every segment the index freezes is written (:meth:`persist`) by one background thread,
in order. Merges happen in the same thread and only swap the merged segment in at the
end, so appends and searches never wait for one; a merged or written segment replaces
its in-memory original with its mapped twin, which hands its pages to the OS's cache.

A segment whose write fails (a full disk) stays in memory only, and one found unusable
at opening is read again into the open segment: either way the segments on disk have a
gap, which the next start reads again from the logs. A merged segment covers each
conversation from its first document to its last, so a merge across that gap would claim
lines no file holds, and they would never be read again. So a segment records whether it
follows its predecessor with no gap between them (:attr:`SegmentEntry.follows`), and a
merge only joins segments that do. Marking the gap, rather than retrying the failed write
before any later one, keeps the rule in one place for both causes of a gap, and costs
only that the segments on either side of it are never merged with each other.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

from shared.recall.disk import (
    FORMAT_VERSION,
    TEXT,
    OpenedSegment,
    SegmentUnusable,
    open_segment,
    verify_body,
    write_segment,
)
from shared.recall.documents import read_message_at
from shared.recall.index import COLUMNS, ID_STARTS, IDS, AgentIndex
from shared.recall.manifest import Manifest, SegmentEntry, read_manifest, write_manifest
from shared.recall.segments import LOOKED_UP, SEGMENT_CAPACITY, Segment, merge
from shared.store.layout import RecallFiles

log = structlog.get_logger(__name__)

LOG_CHECKS = 16
"""Logs whose last indexed line is read at once when opening: after a reboot each read
waits for the disk (~5 ms on the development VM, a second for 200 conversations one
after another), and a disk serves many reads at once about as fast as one."""
MERGE_FANOUT = 8
"""Consecutive segments that fit in one are merged once there are this many of them."""
COLUMN_PREFIX = "doc."
_PREFETCH = (*LOOKED_UP, *(COLUMN_PREFIX + name for name in (*COLUMNS, IDS, ID_STARTS)))
"""Read ahead when a segment is opened: what every search looks into, and the columns
:meth:`AgentIndex.restore` copies at once."""

Covered = dict[str, list[tuple[int, int]]]
"""Per conversation, the (first, last) line offsets of each persisted run, ascending."""


@dataclass
class Loaded:
    parts: list[tuple[Segment, dict[str, np.ndarray]]]
    conversations: list[str]
    covered: Covered
    rebuilding: str | None
    """Why part of what was persisted is read again from the logs, or None."""


@dataclass
class _Live:
    entry: SegmentEntry
    segment: Segment
    opened: OpenedSegment | None = None


@dataclass
class PersistedIndex:
    files: RecallFiles
    log_path: Callable[[str], Path]
    """A conversation id → its ``messages.jsonl``."""
    analyzer: int
    lock: threading.Lock
    """Shared by every ``PersistedIndex`` of one agent: one writer of its manifest."""
    capacity: int = SEGMENT_CAPACITY
    closed: bool = False
    """Set when the index is dropped: its queued writes then do nothing."""
    bytes_on_disk: int = 0
    """What its files take, as last measured."""
    _manifest: Manifest = field(init=False)
    _live: list[_Live] = field(default_factory=list)
    _unbroken: bool = True
    """No write has failed since the last live segment was written: the next one follows it."""

    def __post_init__(self) -> None:
        self._manifest = Manifest(analyzer_version=self.analyzer)

    # --- opening ---------------------------------------------------------------------------

    def load(self) -> Loaded:
        with self.lock:
            return self._load()

    def _load(self) -> Loaded:
        manifest = read_manifest(self.files.manifest)
        rebuilding = None if manifest is not None else "no index on disk"
        if manifest is not None and manifest.analyzer_version != self.analyzer:
            rebuilding, manifest = "analyzer changed", None
        elif manifest is not None and manifest.format_version != FORMAT_VERSION:
            rebuilding, manifest = "format changed", None
        base = Manifest(analyzer_version=self.analyzer)
        if manifest is not None:
            base.conversations, base.next_serial = manifest.conversations, manifest.next_serial
        opened: list[_Live] = []
        for entry in manifest.segments if manifest is not None else []:
            path = self.files.segment(entry.serial)
            try:
                segment = open_segment(path, analyzer=self.analyzer, prefetch=_PREFETCH)
            except SegmentUnusable as exc:
                rebuilding = rebuilding or f"{exc.reason} segment"
                log.warning("recall_segment_unusable", path=str(path), reason=exc.reason)
                continue
            if (segment.documents, segment.body_crc32) != (entry.documents, entry.body_crc32):
                rebuilding = rebuilding or "damaged segment"
                log.warning("recall_segment_unusable", path=str(path), reason="not the one named")
                continue
            opened.append(
                _Live(entry, Segment.from_arrays(0, segment.arrays, segment.text), segment)
            )
        changed = self._changed_logs(opened)
        if changed:
            rebuilding = rebuilding or "conversation log changed"
            log.warning("recall_logs_changed", conversations=sorted(changed))
            opened = [live for live in opened if not changed & live.entry.covers.keys()]
        named = manifest.segments if manifest is not None else []
        opened = _clear_of_dropped(named, opened)
        _mark_gaps(named, opened)
        number = 0
        parts = []
        for live in opened:
            live.segment.base = number
            number += live.entry.documents
            parts.append((live.segment, _columns(live.opened)))
        base.segments = [live.entry for live in opened]
        self._manifest, self._live = base, opened
        if manifest is None or base.segments != manifest.segments:
            self._write_manifest()
        self._remove_unnamed()
        self._count_bytes()
        covered: Covered = {}
        for live in opened:
            for conversation, (first, last, _) in live.entry.covers.items():
                covered.setdefault(conversation, []).append((first, last))
        for runs in covered.values():
            runs.sort()
        return Loaded(parts, list(base.conversations), covered, rebuilding)

    def _changed_logs(self, opened: list[_Live]) -> set[str]:
        """Conversations whose log no longer holds, at the last offset indexed, the message
        indexed there: gone, truncated or replaced."""
        last: dict[str, tuple[int, str]] = {}
        for live in opened:
            for conversation, (_, offset, message_id) in live.entry.covers.items():
                if offset >= last.get(conversation, (-1, ""))[0]:
                    last[conversation] = (offset, message_id)
        with ThreadPoolExecutor(LOG_CHECKS, thread_name_prefix="recall-open") as pool:
            holds = list(pool.map(self._holds, last, last.values()))
        return {c for c, held in zip(last, holds, strict=True) if not held}

    def _holds(self, conversation: str, indexed: tuple[int, str]) -> bool:
        """Does the conversation's log still hold the message indexed last, where it was?"""
        offset, message_id = indexed
        try:
            fields = read_message_at(self.log_path(conversation), offset)
        except (OSError, ValueError):
            return False
        return isinstance(fields, dict) and fields.get("id") == message_id

    def _remove_unnamed(self) -> None:
        """Files of segments the manifest does not name (dropped, or a write or merge cut
        short) and temporary files."""
        named = {self.files.segment(entry.serial).name for entry in self._manifest.segments}
        with contextlib.suppress(FileNotFoundError):
            for path in self.files.directory.iterdir():
                leftover = path.name.startswith(".") and ".tmp" in path.name
                if leftover or (self.files.is_segment(path) and path.name not in named):
                    path.unlink(missing_ok=True)

    # --- writing ---------------------------------------------------------------------------

    def persist(self, index: AgentIndex, segment: Segment) -> None:
        """Write a segment the index froze, then merge what is due (in the writer thread)."""
        with self.lock:
            if self.closed:
                return
            columns = index.columns(segment)
            live = self._write(segment, columns, index.conversations, follows=self._unbroken)
            self._unbroken = live is not None
            if live is None:
                return
            self._live.append(live)
            self._manifest.segments.append(live.entry)
            self._manifest.conversations = list(index.conversations)
            self._write_manifest()
            index.replace([segment], live.segment)
        while (run := self._merge_plan()) is not None:
            if not self._merge(index, run):
                return

    def _write(
        self,
        segment: Segment,
        columns: dict[str, np.ndarray],
        conversations: list[str],
        *,
        follows: bool,
    ) -> _Live | None:
        serial = self._manifest.next_serial
        self._manifest.next_serial += 1
        path = self.files.segment(serial)
        arrays: dict[str, object] = {TEXT: segment.text, **segment.arrays()}
        arrays.update({COLUMN_PREFIX + name: value for name, value in columns.items()})
        try:
            self.files.directory.mkdir(exist_ok=True)  # not parents: a deleted agent stays gone
            crc, _ = write_segment(path, arrays, documents=segment.size, analyzer=self.analyzer)
            opened = open_segment(path, analyzer=self.analyzer)
        except (OSError, SegmentUnusable) as exc:
            log.warning("recall_segment_not_written", path=str(path), error=str(exc))
            return None
        entry = SegmentEntry(
            serial=serial,
            documents=segment.size,
            body_crc32=crc,
            covers=_covers(columns, conversations),
            follows=follows,
        )
        mapped = Segment.from_arrays(segment.base, opened.arrays, opened.text)
        return _Live(entry, mapped, opened)

    def _merge_plan(self) -> tuple[int, int] | None:
        """The first run of at least :data:`MERGE_FANOUT` consecutive segments that fit in
        one and follow one another with no gap between them, extended as far as they
        still do; None when there is none."""
        sizes = [live.entry.documents for live in self._live]
        follows = [live.entry.follows for live in self._live]
        for start in range(len(sizes) - MERGE_FANOUT + 1):
            end = start
            total = 0
            while (
                end < len(sizes)
                and total + sizes[end] <= self.capacity
                and (end == start or follows[end])
            ):
                total += sizes[end]
                end += 1
            if end - start >= MERGE_FANOUT:
                return start, end
        return None

    def _merge(self, index: AgentIndex, run: tuple[int, int]) -> bool:
        """Merge ``run`` outside every lock but the manifest's, then swap it in."""
        start, end = run
        with self.lock:
            if self.closed:
                return False
            olds = self._live[start:end]
            merged = merge([live.segment for live in olds])
            columns = index.columns(merged)
            live = self._write(merged, columns, index.conversations, follows=olds[0].entry.follows)
            if live is None:
                return False
            self._live[start:end] = [live]
            self._manifest.segments[start:end] = [live.entry]
            self._write_manifest()
            index.replace([old.segment for old in olds], live.segment)
            for old in olds:
                self.files.segment(old.entry.serial).unlink(missing_ok=True)
            self._count_bytes()
        log.info("recall_segments_merged", segments=len(olds), documents=live.entry.documents)
        return True

    def _write_manifest(self) -> None:
        self.files.directory.mkdir(exist_ok=True)
        write_manifest(self.files.manifest, self._manifest)
        self._count_bytes()

    # --- checking --------------------------------------------------------------------------

    def damaged(self) -> list[int]:
        """Serials of the live segments whose body no longer matches its checksum (reads
        every file once: run it in the background)."""
        with self.lock:
            live = list(self._live)
        return [
            item.entry.serial
            for item in live
            if item.opened is not None
            and not verify_body(self.files.segment(item.entry.serial), item.opened)
        ]

    def forget(self, serials: list[int]) -> None:
        """Drop segments from the manifest (their documents are read again at the next load)."""
        with self.lock:
            named = self._manifest.segments
            kept = [live for live in self._live if live.entry.serial not in serials]
            kept = _clear_of_dropped(named, kept)
            _mark_gaps(named, kept)
            self._live = kept
            self._manifest.segments = [live.entry for live in kept]
            self._write_manifest()
            kept_serials = {live.entry.serial for live in kept}
            for entry in named:
                if entry.serial not in kept_serials:
                    self.files.segment(entry.serial).unlink(missing_ok=True)
            self._count_bytes()

    def _count_bytes(self) -> None:
        """Measure :attr:`bytes_on_disk` (after every change, in the writer's thread, so
        status reads a number instead of listing files on the daemon's loop)."""
        total = 0
        with contextlib.suppress(FileNotFoundError):
            for path in self.files.directory.iterdir():
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(path).st_size
        self.bytes_on_disk = total


def _clear_of_dropped(named: list[SegmentEntry], kept: list[_Live]) -> list[_Live]:
    """``kept`` without every segment whose claim on a conversation's lines overlaps the
    lines of one of ``named`` that is dropped (and so on, until none does).

    A segment claims each conversation's lines from its first document to its last. A
    segment the catch-up filled from a gap in the logs and then from their tail claims
    the lines between, which another segment holds; if that one is dropped (damaged,
    unusable), its lines must be read again, and the wide claim would say they need not
    be. Dropping the claimant too has both re-read from the logs, once."""
    kept_serials = {live.entry.serial for live in kept}
    dropped = [entry for entry in named if entry.serial not in kept_serials]
    while dropped:
        lost = [live for live in kept if any(_overlap(live.entry, entry) for entry in dropped)]
        if not lost:
            break
        kept = [live for live in kept if live not in lost]
        dropped = [live.entry for live in lost]
    return kept


def _overlap(one: SegmentEntry, other: SegmentEntry) -> bool:
    """Do the two claim a common stretch of some conversation's lines?"""
    for conversation, (first, last, _) in one.covers.items():
        theirs = other.covers.get(conversation)
        if theirs is not None and first <= theirs[1] and theirs[0] <= last:
            return True
    return False


def _mark_gaps(named: list[SegmentEntry], kept: list[_Live]) -> None:
    """Mark each of the ``kept`` segments that followed one of ``named`` no longer kept as
    not following its new predecessor (a copy of its entry: ``named`` stays as it was)."""
    kept_serials = {live.entry.serial for live in kept}
    after_gap = set()
    gap = False
    for entry in named:
        if entry.serial not in kept_serials:
            gap = True
        elif gap:
            after_gap.add(entry.serial)
            gap = False
    for live in kept:
        if live.entry.serial in after_gap and live.entry.follows:
            live.entry = live.entry.model_copy(update={"follows": False})


def _columns(opened: OpenedSegment | None) -> dict[str, np.ndarray]:
    assert opened is not None
    names = (*COLUMNS, IDS, ID_STARTS)
    return {name: opened.arrays[COLUMN_PREFIX + name] for name in names}


def _covers(
    columns: dict[str, np.ndarray], conversations: list[str]
) -> dict[str, tuple[int, int, str]]:
    """Per conversation: the offsets of its first and last document's lines, and the id
    of the last (to tell, at the next start, that the log still holds it there)."""
    numbers = columns["conversation"]
    offsets = columns["offsets"]
    ids, starts = columns[IDS], columns[ID_STARTS]
    unique, first = np.unique(numbers, return_index=True)
    _, from_end = np.unique(numbers[::-1], return_index=True)
    last = len(numbers) - 1 - from_end
    found = {}
    for number, a, b in zip(unique.tolist(), first.tolist(), last.tolist(), strict=True):
        message_id = ids[int(starts[b]) : int(starts[b + 1])].tobytes().decode()
        found[conversations[number]] = (int(offsets[a]), int(offsets[b]), message_id)
    return found
