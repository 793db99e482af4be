"""One of each per home: ``agentd up`` holds ``run/up.lock`` and ``agentd serve`` holds
``run/agentd.lock`` for as long as it runs.

A ``flock`` (:mod:`shared.store.locks`), taken before anything else starts: two processes
racing at start-up cannot both get it (a check of the socket can be passed by both), and
the kernel releases it when its holder dies, however it dies, so a crash never leaves a
home locked.
"""

from __future__ import annotations

from pathlib import Path

from shared.store import locks

LOCK_GRACE_S = 1.0
"""How long a starting process retries: a status probe holds the lock for microseconds,
a running instance for good."""


def hold(path: Path) -> locks.HeldFile | None:
    """The lock on ``path``, held until the result is closed; None when another process
    holds it."""
    return locks.hold(path, LOCK_GRACE_S)


def held(path: Path) -> bool:
    """True while a process holds the lock on ``path``, whatever else it is doing."""
    return locks.held(path)
