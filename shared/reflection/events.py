"""A reflection's outcome log: every finished job, appended to ``reflections/log.jsonl``.

The daemon records each job's outcome there (durable, the record of truth) and as the
job's state in Redis (:mod:`agentd.jobs.record`); either may fail without the other, so
the daemon reads both. Readers (``agentctl reflections``, status, the web view) import the
line format from here, never spell it themselves.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import structlog

from shared.models.reflection import ReflectionOutcome
from shared.store.layout import ReflectionFiles
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)


def append(reflections_dir: Path, outcome: ReflectionOutcome) -> None:
    """Append ``outcome`` to the agent's outcome log, fsynced; a failure is logged, not
    raised (the outcome still goes to the job's Redis record).

    A line a crash cut short is closed first, so it costs only itself: glued to it, this
    outcome would be unreadable too."""
    line = (outcome.model_dump_json() + "\n").encode()
    try:
        reflections_dir.mkdir(parents=True, exist_ok=True)
        files = ReflectionFiles(reflections_dir)
        with file_lock(files.outcome_log_lock):
            fd = os.open(files.outcome_log, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        log.error(
            "outcome_not_logged",
            error=str(exc),
            hint="the outcome is still published on Redis; free disk space",
        )


def read(reflections_dir: Path, *, tail: int = 100) -> list[ReflectionOutcome]:
    """The last ``tail`` outcomes of the log, oldest first; unreadable lines are skipped
    (a line cut by a crash, or written by a newer version)."""
    path = ReflectionFiles(reflections_dir).outcome_log
    if not path.exists():
        return []
    outcomes = []
    for line in path.read_text(errors="replace").splitlines()[-tail:]:
        with contextlib.suppress(ValueError):
            outcomes.append(ReflectionOutcome.model_validate_json(line))
    return outcomes


def answers_request(outcome: ReflectionOutcome) -> bool:
    """Every outcome settles its request except ``already_active``: that delivery found
    another job holding the agent, and this one's answer is still to come; if none comes,
    the job looks lost once the lease is free, and is sent again."""
    return outcome.reason != "already_active"
