"""Git lock files as a crash leaves them, and as a live git holds them."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from shared.memory.git_locks import live_git_processes
from tests.support.waiting import ceiling, wait_for

LONG_AGO = 946_684_800.0
"""2000-01-01 UTC: before this machine booted, so before every live process started."""


def plant_stale_lock(path: Path) -> Path:
    """A lock left by a git that crashed long ago: written before any live git started."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.utime(path, (LONG_AGO, LONG_AGO))
    return path


@contextlib.contextmanager
def live_git(cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A git process that stays alive until the block ends (``cat-file`` reading stdin).

    The block starts once ``/proc`` shows it as a git, so a lock planted inside the block
    was written after it started, as if it held it."""
    process = subprocess.Popen(
        ["git", "-C", str(cwd), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )

    def showing() -> bool:
        assert process.poll() is None, f"the live git exited with status {process.returncode}"
        return any(p.pid == process.pid for p in live_git_processes() or [])

    wait_for(showing, "the live git to show in /proc", timeout_s=10)
    try:
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=ceiling(30))


def plant_held_lock(path: Path) -> Path:
    """A lock written now; inside :func:`live_git`, a live git may be holding it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path
