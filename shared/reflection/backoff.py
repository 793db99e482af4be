"""Retry backoff and the configuration pause, kept on disk so they survive restarts.

Fed only by finished jobs. A consumed outcome (merged, no_changes) clears both. A run
whose model call failed with an error a user must fix pauses automatic reflection for the
agent (:mod:`shared.reflection.pause`); any other finished run lifts a pause. A sub-agent
that ended badly on its own (it did not read, gave no report, ran out of steps) does not
back off: a better run may come at once. Every other non-consumed outcome — a model call
that failed, parent dirty, merge conflict, uncommitted edits, a failed integration —
waits 60 s, then twice as long each time, at most 30 min. Manual runs bypass the gate but
still feed it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import structlog
from pydantic import BaseModel

from shared.errors import CorruptStateFile
from shared.models.migrations import StateKind, current_version, migration
from shared.reflection.pause import Pause
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import ReflectionFiles
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)

FIRST_DELAY_S = 60.0
MAX_DELAY_S = 30 * 60.0


@migration("backoff")
def v1_to_v2_pause_with_its_setup(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """v1 paused on a bare error code (``configuration_error``), also for a provider's
    one-off 400, and never said why or knew when the setup changed. That pause is dropped:
    the next run checks the configuration again, and pauses anew if it is still wrong."""
    return {key: value for key, value in raw.items() if key != "configuration_error"}


class BackoffState(BaseModel):
    schema_kind: ClassVar[StateKind] = "backoff"
    schema_version: int = current_version("backoff")
    retry_at: datetime | None = None
    delay_s: float | None = None
    pause: Pause | None = None


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
    backs_off: bool,
    pause: Pause | None,
    now: datetime,
) -> BackoffState:
    """Feed one finished run: ``pause`` when it failed with an error a user must fix,
    ``backs_off`` when a later run should wait (see the module)."""
    reflections_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(ReflectionFiles(reflections_dir).backoff_lock):
        state = load_backoff(reflections_dir)
        if consumed:
            state = BackoffState()
        elif pause is not None:
            state.pause = pause
        else:
            state.pause = None
            if backs_off:
                delay = (
                    FIRST_DELAY_S if state.delay_s is None else min(2 * state.delay_s, MAX_DELAY_S)
                )
                state.delay_s = delay
                state.retry_at = now + timedelta(seconds=delay)
        write_model_atomic(_path(reflections_dir), state)
        return state
