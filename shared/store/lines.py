"""Reading a log's lines backwards: apart from :mod:`shared.store.jsonl` because recall's
process reads logs this way and never imports the message models (pydantic)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

_BLOCK = 1 << 16


def lines_backwards(path: Path, end: int | None = None) -> Iterator[bytes]:
    """The lines before byte ``end`` (the end of the file by default; otherwise the start
    of a line), newest first, read backwards block by block; each ends with its newline
    except an unterminated last one (a torn append)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        position = size if end is None else min(end, size)
        carry = b""
        while position > 0:
            start = max(0, position - _BLOCK)
            chunk = os.pread(fd, position - start, start) + carry
            position = start
            pieces = chunk.split(b"\n")
            lines = [piece + b"\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
            carry = lines.pop(0) if position > 0 and lines else b""
            yield from reversed(lines)
    finally:
        os.close(fd)
