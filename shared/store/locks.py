"""Advisory file locks (``flock``) for counters and for an agent's memory checkout.

A file lock, not Redis: chat must never depend on Redis, and the kernel releases a
``flock`` when its holder dies, so a crashed process never leaves a lock behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from shared.errors import StoreError

DEFAULT_LOCK_TIMEOUT_S = 120.0
_POLL_S = 0.02


class LockTimeout(StoreError):
    code = "lock_timeout"


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"could not lock {path} within {timeout_s:.0f} s; another agentd "
                        "process holds it (check `agentctl status` or wait and retry)"
                    ) from None
                time.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def async_file_lock(
    path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> AsyncIterator[None]:
    """The same lock for asyncio code: polls without blocking the event loop."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(
                        f"could not lock {path} within {timeout_s:.0f} s; another agentd "
                        "process holds it (check `agentctl status` or wait and retry)"
                    ) from None
                await asyncio.sleep(_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
