"""A frozen segment on disk: named arrays behind a checked header, mapped, never read whole.

The file::

    magic (8 bytes) | format version (u32) | header length (u32) | header CRC-32 (u32)
    header (JSON: analyzer version, documents, body CRC-32, each array's dtype/offset/count)
    arrays, each starting on a page boundary

Opening checks only what is cheap (magic, format, header checksum, analyzer, that every
array lies inside the file) and maps the arrays with ``mmap``: nothing is copied, the
pages are the OS's cache and are read when a search touches them, which is what lets the
daemon answer a search over a million messages moments after it starts. The body's
checksum costs a read of the whole file, so :func:`verify_body` runs in the background,
reading with ``pread`` (the pages it reads are cached, not mapped into the daemon).

The mappings are advised ``MADV_RANDOM``: a search touches a few pages here and there (a
binary search, a candidate's text), and by default the kernel reads around every page
missing from the cache the device's whole read-ahead window (8 MB on the development
VM), so after a reboot the first search read 700 MB, the whole index, to touch 140
pages. The arrays named ``prefetch`` (read whole, or looked into by every search) are
read ahead instead (``MADV_WILLNEED``), in the background, as soon as they are mapped.

The format is generic over the arrays a segment holds (:meth:`Segment.arrays` names
them): a new column or posting array is one more entry in the header. The array named
``text`` is mapped as :class:`MappedText`, which ``count``s and ``find``s like ``bytes``.

Writes are crash-safe: a temporary file in the same directory, ``fsync``, ``rename``, and
an ``fsync`` of the directory, so after a crash the name holds the whole file or nothing.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared.store.writes import raise_if_disk_full

MAGIC = b"AGDRECL\x00"
FORMAT_VERSION = 2
"""Bumped whenever the layout of a file, or what an array means, changes (2: keys are
XXH3, no longer BLAKE2b)."""
TEXT = "text"
"""The array mapped as :class:`MappedText` rather than as numbers."""
_PREFIX = struct.Struct("<8sIII")
_PAGE = mmap.ALLOCATIONGRANULARITY
_CHUNK = 8 << 20


class SegmentUnusable(Exception):
    """A segment file that cannot be searched; ``reason`` is what status shows."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path.name}: {reason}")
        self.reason = reason


class MappedText(mmap.mmap):
    """A segment's text in a read-only mapping: ``find`` is mmap's own, ``count`` reads
    just the stretch it counts in (``bytes.count`` on a slice, a few hundred bytes)."""

    def count(self, sub: bytes, start: int, end: int) -> int:
        return self[start:end].count(sub)


@dataclass(frozen=True)
class OpenedSegment:
    arrays: dict[str, np.ndarray]
    text: MappedText
    documents: int
    body_crc32: int
    body_start: int
    size: int


def write_segment(
    path: Path, arrays: Mapping[str, Any], *, documents: int, analyzer: int
) -> tuple[int, int]:
    """Write the named arrays (numpy arrays, or ``bytes``-like for :data:`TEXT`) to
    ``path`` atomically; returns (body CRC-32, file size)."""
    layout: dict[str, dict[str, Any]] = {}
    views: list[tuple[int, memoryview]] = []
    offset = 0
    for name, value in arrays.items():
        array = np.frombuffer(value, dtype=np.uint8) if name == TEXT else np.asarray(value)
        view = memoryview(np.ascontiguousarray(array)).cast("B")
        layout[name] = {"dtype": array.dtype.str, "offset": offset, "count": int(array.size)}
        views.append((offset, view))
        offset = _aligned(offset + len(view))
    body_crc = 0
    position = 0
    for at, view in views:
        body_crc = zlib.crc32(bytes(at - position), body_crc)
        body_crc = zlib.crc32(view, body_crc)
        position = at + len(view)
    header = {"analyzer": analyzer, "documents": documents, "body_crc32": body_crc}
    header["arrays"] = layout
    encoded = json.dumps(header, separators=(",", ":")).encode()
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(encoded), zlib.crc32(encoded))
    body_start = _aligned(len(prefix) + len(encoded))
    size = body_start + position
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(prefix + encoded + bytes(body_start - len(prefix) - len(encoded)))
            written = 0
            for at, view in views:
                handle.write(bytes(at - written))
                handle.write(view)
                written = at + len(view)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        sync_directory(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise_if_disk_full(exc, path, size)
        raise
    return body_crc, size


def open_segment(path: Path, *, analyzer: int, prefetch: Collection[str] = ()) -> OpenedSegment:
    """Map a segment file after checking its header (not its body: :func:`verify_body`),
    reading ahead the arrays named in ``prefetch``.

    Raises :class:`SegmentUnusable` saying why it cannot be used."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SegmentUnusable(path, "missing") from None
    try:
        size = os.fstat(fd).st_size
        prefix = os.pread(fd, _PREFIX.size, 0)
        if len(prefix) < _PREFIX.size:
            raise SegmentUnusable(path, "damaged")
        magic, version, header_length, header_crc = _PREFIX.unpack(prefix)
        if magic != MAGIC:
            raise SegmentUnusable(path, "damaged")
        if version != FORMAT_VERSION:
            raise SegmentUnusable(path, "format changed")
        encoded = os.pread(fd, header_length, _PREFIX.size)
        if len(encoded) != header_length or zlib.crc32(encoded) != header_crc:
            raise SegmentUnusable(path, "damaged")
        header = json.loads(encoded)
        if header["analyzer"] != analyzer:
            raise SegmentUnusable(path, "analyzer changed")
        body_start = _aligned(_PREFIX.size + header_length)
        whole = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        if whole is not None:
            whole.madvise(mmap.MADV_RANDOM)
        arrays: dict[str, np.ndarray] = {}
        text: MappedText | None = None
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            start = body_start + spec["offset"]
            length = spec["count"] * dtype.itemsize
            if start + length > size or whole is None or (name == TEXT and not length):
                raise SegmentUnusable(path, "damaged")
            if name == TEXT:
                text = MappedText(fd, length, offset=start, access=mmap.ACCESS_READ)
                text.madvise(mmap.MADV_RANDOM)
            else:
                arrays[name] = np.frombuffer(whole, dtype=dtype, count=spec["count"], offset=start)
                if name in prefetch and length:
                    whole.madvise(mmap.MADV_WILLNEED, start, length)
        if text is None:
            raise SegmentUnusable(path, "damaged")
        return OpenedSegment(
            arrays, text, header["documents"], header["body_crc32"], body_start, size
        )
    except (ValueError, KeyError, TypeError):  # a header that parses but is not ours
        raise SegmentUnusable(path, "damaged") from None
    finally:
        os.close(fd)


def verify_body(path: Path, opened: OpenedSegment) -> bool:
    """Does the file's body still match its checksum? Reads it, in chunks, with ``pread``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        crc = 0
        position = opened.body_start
        while position < opened.size:
            chunk = os.pread(fd, min(_CHUNK, opened.size - position), position)
            if not chunk:
                return False
            crc = zlib.crc32(chunk, crc)
            position += len(chunk)
        return crc == opened.body_crc32
    finally:
        os.close(fd)


def sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _aligned(offset: int) -> int:
    return -(-offset // _PAGE) * _PAGE
