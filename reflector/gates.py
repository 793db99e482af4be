"""The gates an automatic run passes before it takes the agent's lease, and what a finished
run feeds back into them: the retry backoff and the configuration pause
(:mod:`shared.reflection.backoff`, :mod:`shared.reflection.pause`).

Apart from the pipeline because the decision has rules of its own: which failures pause
the agent and which back off, and when a pause lifts (the worker's model setup is not the
one it failed with). Manual runs skip these gates but still feed them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import structlog

from reflector.finalize import FinalizeResult
from reflector.subagent import SubagentRun
from shared.models.agents import AgentRecord
from shared.reflection import backoff
from shared.reflection.pause import PAUSING_ERRORS, Pause, describe, setup_digest
from shared.settings import Settings

log = structlog.get_logger(__name__)

Skip = tuple[str, str]
"""A gate that closed: the outcome's reason and its message."""


def model_setup(settings: Settings, agent: AgentRecord, credentials: Iterable[str] = ()) -> str:
    """The digest of what the reflection sub-agent's model calls depend on for ``agent``:
    the model string (as :class:`reflector.tasks.Reflect` picks it), the api base, the
    window and the credentials (``credentials``: the worker's provider keys)."""
    model = settings.reflection_model or agent.model or settings.model
    return setup_digest(
        [
            model,
            settings.api_base,
            settings.reflection_context_window,
            settings.api_key,
            *credentials,
        ]
    )


def automatic_gate(
    reflections_dir: Path, *, now: datetime, setup: str, agent: AgentRecord
) -> Skip | None:
    """Why an automatic run must not start now (retry backoff, or a pause the current
    model setup did not fix), or None."""
    state = backoff.load_backoff(reflections_dir)
    if backoff.deferred(state, now):
        return "retry_backoff", f"Retrying after {state.retry_at}."
    pause = state.pause
    if pause is None:
        return None
    if pause.setup != setup:
        log.info("reflection_pause_lifted", reason=pause.reason, why="the model setup changed")
        return None
    text = describe(pause, agent.name)
    return "configuration_error", text[0].upper() + text[1:]


def feed_backoff(
    reflections_dir: Path,
    run: SubagentRun,
    result: FinalizeResult,
    *,
    setup: str,
    now: datetime,
) -> None:
    """Record a finished run: a pause for an error a user must fix, a backoff for a model
    call that failed, a merge that did not happen or content memory may not hold (the same
    transcript may talk the reflector into it again), nothing for a sub-agent that simply
    did badly (a better run may come at once)."""
    pause = None
    if run.error_code in PAUSING_ERRORS:
        pause = Pause(
            reason=run.error_code,
            message=run.error_message or run.error_code,
            setup=setup,
            since=now,
        )
        log.warning("reflection_paused", reason=run.error_code, error=run.error_message)
    backoff.record_result(
        reflections_dir,
        consumed=result.consumed,
        backs_off=(
            result.status != "failed"
            or result.failure_phase == "integration"
            or run.error_code is not None
            or result.reason is not None
        ),
        pause=pause,
        now=now,
    )
