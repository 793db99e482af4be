"""One registry of schema upgrades for every state file that carries a ``schema_version``.

Each kind of state file has a list of steps; step *n* turns the stored dict of version
*n* into version *n + 1*, so a file of any older version is upgraded by running the steps
after its version, in order, and the current version is one more than the number of
steps. A file without ``schema_version`` is version 1 (every kind started without one or
at 1). Loaders call :func:`migrate` before validating: :func:`shared.store.atomic.read_model`
does it for every model that names its ``schema_kind``.

A file from a *newer* agentd is refused with :class:`~shared.errors.StateFileTooNew`:
reading it as this version's shape and writing it back would silently drop whatever the
newer version added.

A step lives beside the model it upgrades, registered with :func:`migration` above the
model's class, so the model's default ``schema_version`` (:func:`current_version`) counts
it. This module imports nothing of agentd's but its errors: every layer may use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

import structlog

from shared.errors import CorruptStateFile, StateFileTooNew

log = structlog.get_logger(__name__)

StateKind = Literal[
    "agent",
    "conversation",
    "context",
    "compaction-event",
    "backoff",
    "reflection-state",
    "approvals",
]
"""Every kind of versioned state file: ``agent.json``, ``conversation.json``,
``context.json``, ``compaction-event.json``, ``reflections/backoff.json``,
``reflection-state.json`` and ``approvals.json``."""

Step = Callable[[dict[str, Any], Path], dict[str, Any]]
"""One upgrade: the stored dict of version N and the file's path → the dict of N + 1.

The path lets a step read what the file sits beside (the reflection state recounts its
steps from the conversation's log). The registry stamps the new ``schema_version``."""

_STEPS: dict[str, list[Step]] = {kind: [] for kind in get_args(StateKind)}


def migration(kind: StateKind) -> Callable[[Step], Step]:
    """Register the decorated step as ``kind``'s upgrade from its current version."""

    def register(step: Step) -> Step:
        _STEPS[kind].append(step)
        return step

    return register


def current_version(kind: StateKind) -> int:
    return len(_STEPS[kind]) + 1


def stored_version(data: dict[str, Any], path: Path) -> int:
    """The version ``data`` says it is (1 when it does not say).

    Raises :class:`CorruptStateFile` when ``schema_version`` is not a positive integer.
    """
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptStateFile(path, f"schema_version {version!r} is not a version number")
    return version


def migrate(kind: StateKind, data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` (read from ``path``) upgraded to ``kind``'s current version.

    Raises :class:`StateFileTooNew` for a version above the current one and
    :class:`CorruptStateFile` for a ``schema_version`` that is not a version.
    """
    version = stored_version(data, path)
    current = current_version(kind)
    if version > current:
        raise StateFileTooNew(path, kind, version, current)
    steps = _STEPS[kind][version - 1 :]
    for number, step in enumerate(steps, start=version + 1):
        data = {**step(data, path), "schema_version": number}
    if steps:
        log.info(
            "state_file_migrated",
            kind=kind,
            path=str(path),
            from_version=version,
            to_version=current,
            steps=[step.__name__ for step in steps],
        )
    return data
