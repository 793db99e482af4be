"""Watch who is at an agent's memory lock, so race tests order their steps, not time them."""

from __future__ import annotations

import os
from pathlib import Path

PROC_FDS = Path("/proc/self/fd")


def descriptors_on(lock_path: Path) -> int:
    """How many descriptors this process has open on ``lock_path``: the holder's, plus one
    per waiter (``shared.store.locks`` opens the file before it starts polling)."""
    target = str(lock_path)
    count = 0
    for fd in PROC_FDS.iterdir():
        try:
            count += os.readlink(fd) == target
        except OSError:
            continue
    return count
