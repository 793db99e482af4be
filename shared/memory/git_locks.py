"""Git's lock files in a memory repo: tell one left by a dead git from one a live git holds.

Git takes a lock by creating ``<file>.lock`` and deletes it when done. A git killed in
between leaves it behind, and every later git that needs the same file fails with
"Unable to create '….lock': File exists" until someone deletes it: a crashed merge would
fail every reflection forever. Deleting a lock that a live git still holds would let two
writers interleave, so the judgement is exact rather than an age: the git holding a lock
was already running when it wrote the file, so a lock last written before every live
git process started (start times from ``/proc``) has no live holder and is stale. Any
other lock may be held: the caller raises :class:`MemoryBusy`, which is worth a retry.

Every git process on the machine counts, not only ours: that can only make a stale lock
look live for a while (``memory_busy``, retried), never the reverse. A git sandboxed in
its own PID namespace still shows in our ``/proc``.

Callers hold the memory lock while they remove anything, so agentd's own writers of the
checkout cannot race them. Gits that don't take the memory lock (the user's, or a
reflection sub-agent's in its worktree) could create a new lock between the look and the
unlink; the file is checked to be the very one judged just before it is removed.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from shared.errors import MemoryBusy

log = structlog.get_logger(__name__)

PROC = Path("/proc")
START_SLACK_S = 1.0
"""A git counts as started before a lock unless it started more than this after the lock
was written: covers the clock-tick resolution of ``/proc`` and small clock adjustments."""

_LOCK_FAILURE = re.compile(r"Unable to create '([^']+\.lock)': File exists")
_STARTTIME_FIELD = 19
"""Index of ``starttime`` in ``/proc/<pid>/stat`` after the ``(comm)`` field (field 22)."""


@dataclass(frozen=True, slots=True)
class GitProcess:
    pid: int
    started: float
    """Wall-clock start time, seconds since the epoch."""


def blocking_lock(stderr: str) -> Path | None:
    """The lock file git failed to create, from its error message; None for other failures."""
    match = _LOCK_FAILURE.search(stderr)
    return Path(match.group(1)) if match else None


def lock_files(git_dir: Path) -> list[Path]:
    """Every lock file in ``git_dir``: on its own files, on refs, in linked worktrees."""
    found = [*git_dir.glob("*.lock"), *git_dir.glob("worktrees/*/*.lock")]
    found += (git_dir / "refs").rglob("*.lock")
    return sorted(path for path in found if path.is_file())


def live_git_processes() -> list[GitProcess] | None:
    """Every running (not zombie) git process and when it started; None without ``/proc``."""
    if not PROC.is_dir():
        return None
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    ticks = os.sysconf("SC_CLK_TCK")
    found: list[GitProcess] = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if comm != "git" and not comm.startswith("git-"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            found.append(GitProcess(int(entry.name), boot + int(fields[_STARTTIME_FIELD]) / ticks))
    return found


def possible_holders(written_at: float) -> list[GitProcess] | None:
    """Live gits that may hold a lock written at ``written_at``; None if we cannot tell."""
    processes = live_git_processes()
    if processes is None:
        return None
    return [p for p in processes if p.started <= written_at + START_SLACK_S]


def remove_if_stale(lock: Path) -> bool:
    """Delete ``lock`` if no live git may hold it, with a warning; True if it is gone now."""
    try:
        judged = lock.stat()
    except FileNotFoundError:
        return True
    holders = possible_holders(judged.st_mtime)
    if holders is None or holders:
        return False
    try:
        current = lock.stat()
    except FileNotFoundError:
        return True
    if (current.st_ino, current.st_mtime_ns) != (judged.st_ino, judged.st_mtime_ns):
        return False
    lock.unlink(missing_ok=True)
    log.warning(
        "git_lock_removed",
        path=str(lock),
        age_s=round(time.time() - judged.st_mtime, 1),
        reason="no live git process started before it was written",
    )
    return True


def remove_stale(git_dir: Path) -> list[Path]:
    """Delete every stale lock file in ``git_dir``; the ones removed."""
    return [lock for lock in lock_files(git_dir) if lock.exists() and remove_if_stale(lock)]


def settle(lock: Path, removed: set[Path]) -> None:
    """After git failed on ``lock``: remove it if stale (add it to ``removed``; the caller
    runs git again) or raise :class:`MemoryBusy`. A lock already in ``removed`` came back,
    so a live git has it."""
    if lock in removed or not remove_if_stale(lock):
        raise busy(lock)
    removed.add(lock)


def busy(lock: Path) -> MemoryBusy:
    """The error for ``lock`` held by a live git, naming the gits that may hold it."""
    try:
        holders = possible_holders(lock.stat().st_mtime)
    except FileNotFoundError:
        holders = []
    pids = f" (pid {', '.join(str(p.pid) for p in holders)})" if holders else ""
    return MemoryBusy(
        f"memory is busy: a running git process{pids} holds {lock}; try again once it has "
        "finished (if no git is running, delete that file)"
    )
