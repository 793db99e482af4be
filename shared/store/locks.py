"""Advisory file locks (``flock``): for counters and an agent's memory checkout held for
a block, and for a process that holds its home for as long as it runs
(:mod:`agentd.stack.instance`). The one place agentd takes a ``flock``.

A file lock, not Redis: chat must never depend on Redis, and the kernel releases a
``flock`` when its holder dies, so a crashed process never leaves a lock behind.
Every form polls a non-blocking ``flock`` (the async one sleeps between tries without
blocking the event loop), with the lock file open from the first try to the release: a
waiter is an open descriptor on the file, which tests count to order their steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from shared.errors import LockTimeout

DEFAULT_LOCK_TIMEOUT_S = 120.0
_POLL_S = 0.02


class _Attempt:
    """One process's attempt at the lock on ``path``: an open descriptor and a deadline."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def try_acquire(self) -> bool:
        """True once held; raises ``LockTimeout`` when the deadline has passed (the
        descriptor stays open: :meth:`release` closes it)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= self.deadline:
                raise LockTimeout(
                    f"could not lock {self.path} within {self.timeout_s:.0f} s; another agentd "
                    "process holds it (check `agentctl status` or wait and retry)"
                ) from None
            return False

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    attempt = _Attempt(path, timeout_s)
    try:
        while not attempt.try_acquire():
            time.sleep(_POLL_S)
        yield
    finally:
        attempt.release()


@contextlib.asynccontextmanager
async def async_file_lock(
    path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> AsyncIterator[None]:
    """The same lock for asyncio code."""
    attempt = _Attempt(path, timeout_s)
    try:
        while not attempt.try_acquire():
            await asyncio.sleep(_POLL_S)
        yield
    finally:
        attempt.release()


class HeldFile:
    """A lock held until :meth:`close`, or until the process ends, however it ends."""

    def __init__(self, attempt: _Attempt) -> None:
        self._attempt: _Attempt | None = attempt

    def close(self) -> None:
        if self._attempt is not None:
            self._attempt.release()
            self._attempt = None

    def __enter__(self) -> HeldFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold(path: Path, timeout_s: float) -> HeldFile | None:
    """The exclusive lock on ``path`` (created if missing), held until the result is
    closed; None when another process still holds it after ``timeout_s``."""
    attempt = _Attempt(path, timeout_s)
    try:
        while not attempt.try_acquire():
            time.sleep(_POLL_S)
    except LockTimeout:
        attempt.release()
        return None
    return HeldFile(attempt)


def held(path: Path) -> bool:
    """True while some process holds the lock on ``path``; a missing file is not held (and
    is not created: asking changes nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own shared lock, if it got one
    return False
