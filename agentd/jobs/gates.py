"""The retry backoff an automatic job waits for before the daemon sends it, and what a
finished job feeds back: the backoff and the configuration pause
(:mod:`shared.reflection.backoff`, :mod:`shared.reflection.pause`).

Apart from the settling because the decision has rules of its own: which failures pause
the agent and which back off. A pause is checked by the worker, against its own model
setup (:mod:`reflector.gates`): the job carries it. Manual runs skip the backoff but
still feed it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import structlog

from agentd.jobs.finalize import FinalizeResult
from shared.reflection import backoff
from shared.reflection.pause import PAUSING_ERRORS, Pause

log = structlog.get_logger(__name__)

Skip = tuple[str, str]
"""A gate that closed: the outcome's reason and its message."""
REFUSED_CONTENT = frozenset(
    {"nested_repository", "memory_too_large", "too_many_commits", "job_too_large"}
)
"""Failures for what a reflection made (or memory is): the same transcript may talk the
reflector into the same again, so the next automatic run waits like any failed one."""
REFUSED_ANSWER = frozenset({"invalid_answer", "bundle_corrupt"})
"""An answer the daemon could not take: the worker that sent it would send it again."""


def retry_backoff(reflections_dir: Path, *, now: datetime) -> Skip | None:
    """Why an automatic run must not be sent now (the retry backoff), or None."""
    state = backoff.load_backoff(reflections_dir)
    if backoff.deferred(state, now):
        return "retry_backoff", f"Retrying after {state.retry_at}."
    return None


def current_pause(reflections_dir: Path) -> Pause | None:
    """The pause an automatic job carries to the worker that runs it."""
    return backoff.load_backoff(reflections_dir).pause


def feed_backoff(
    reflections_dir: Path,
    result: FinalizeResult,
    *,
    error_code: str | None,
    error_message: str | None,
    setup: str,
    now: datetime,
) -> None:
    """Record a finished run: a pause for an error a user must fix, a backoff for a model
    call that failed, a merge that did not happen or content memory may not hold (the same
    transcript may talk the reflector into it again), nothing for a sub-agent that simply
    did badly (a better run may come at once)."""
    pause = None
    if error_code in PAUSING_ERRORS:
        pause = Pause(
            reason=error_code,
            message=error_message or error_code,
            setup=setup,
            since=now,
        )
        log.warning("reflection_paused", reason=error_code, error=error_message)
    backoff.record_result(
        reflections_dir,
        consumed=result.consumed,
        backs_off=(
            result.status != "failed"
            or result.failure_phase == "integration"
            or error_code is not None
            or result.reason is not None
        ),
        pause=pause,
        now=now,
    )


def feed_failure(reflections_dir: Path, reason: str, *, now: datetime) -> None:
    """Record a job that failed before or outside its run: some failures back off."""
    if reason in REFUSED_CONTENT | REFUSED_ANSWER:
        backoff.record_result(reflections_dir, consumed=False, backs_off=True, pause=None, now=now)
