"""Low-level writes: all the bytes or an exception, and a full disk named as such.

``os.write`` may write less than it was given (a disk filling up mid-write does exactly
that) and a caller that ignores the count keeps half a line or half a JSON file. A write
refused for want of space becomes :class:`DiskFull`, which says how much the write
needed and how much was free, so the user knows what to clear.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from shared.errors import DiskFull

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def raise_if_disk_full(exc: OSError, path: Path, needed: int) -> None:
    """Raise :class:`DiskFull` (from ``exc``) if ``exc`` says the disk had no room."""
    if exc.errno not in _NO_SPACE:
        return
    try:
        stats = os.statvfs(path.parent)
        free = stats.f_bavail * stats.f_frsize
    except OSError:
        free = 0
    raise DiskFull(path, needed=needed, free=free) from exc
