"""Retry backoff after integration failures, kept on disk so it survives restarts.

Fed only by finished jobs. A consumed outcome (merged, no_changes) clears it. A failure of
the sub-agent itself does not back off (a better run may come at once) unless it was a
configuration error, which pauses automatic reflection for the agent until a run
succeeds. Every other non-consumed outcome — parent dirty, merge conflict, uncommitted
edits, a failed integration — waits 60 s, then twice as long each time, at most 30 min.
Manual runs bypass the gate but still feed it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import structlog
from pydantic import BaseModel

from shared.errors import CorruptStateFile
from shared.models.migrations import StateKind, current_version
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import ReflectionFiles
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)

FIRST_DELAY_S = 60.0
MAX_DELAY_S = 30 * 60.0


class BackoffState(BaseModel):
    schema_kind: ClassVar[StateKind] = "backoff"
    schema_version: int = current_version("backoff")
    retry_at: datetime | None = None
    delay_s: float | None = None
    configuration_error: str | None = None


def _path(reflections_dir: Path) -> Path:
    return ReflectionFiles(reflections_dir).backoff


def load_backoff(reflections_dir: Path) -> BackoffState:
    """The agent's backoff; a damaged file counts as no backoff (logged): it only ever
    delays automatic runs, so forgetting it costs at most one early retry, while refusing
    to read it would stop reflection for the agent for good."""
    try:
        return read_model(_path(reflections_dir), BackoffState) or BackoffState()
    except CorruptStateFile as exc:
        log.warning("backoff_state_reset", path=exc.path, error=exc.message)
        return BackoffState()


def deferred(state: BackoffState, now: datetime) -> bool:
    """Strict: a launch at exactly ``retry_at`` is allowed."""
    return state.retry_at is not None and now < state.retry_at


def record_result(
    reflections_dir: Path,
    *,
    consumed: bool,
    integration_failure: bool,
    configuration_error: str | None,
    now: datetime,
) -> BackoffState:
    reflections_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(ReflectionFiles(reflections_dir).backoff_lock):
        state = load_backoff(reflections_dir)
        if consumed:
            state = BackoffState()
        elif configuration_error is not None:
            state.configuration_error = configuration_error
        elif integration_failure:
            delay = FIRST_DELAY_S if state.delay_s is None else min(2 * state.delay_s, MAX_DELAY_S)
            state.delay_s = delay
            state.retry_at = now + timedelta(seconds=delay)
        write_model_atomic(_path(reflections_dir), state)
        return state
