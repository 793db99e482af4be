"""One of each per home: ``agentd up`` holds ``run/up.lock`` and ``agentd serve`` holds
``run/agentd.lock`` for as long as it runs.

A ``flock``, taken before anything else starts: two processes racing at start-up cannot
both get it (a check of the socket can be passed by both), and the kernel releases it
when its holder dies, however it dies, so a crash never leaves a home locked.
"""

from __future__ import annotations

import fcntl
import time
from pathlib import Path
from typing import IO

LOCK_GRACE_S = 1.0
"""How long a starting process retries: a status probe holds the lock for microseconds,
a running instance for good."""


def hold(path: Path) -> IO[str] | None:
    """The lock on ``path``, held until the returned file is closed; None when another
    process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(path, "w")  # noqa: SIM115 - held for the run
    deadline = time.monotonic() + LOCK_GRACE_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                return None
            time.sleep(0.05)


def held(path: Path) -> bool:
    """True while a process holds the lock on ``path``, whatever else it is doing."""
    try:
        probe = open(path)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    with probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False
