"""What a worker checks about a job before it runs the sub-agent: the configuration pause,
against its own model setup.

A pause (:mod:`shared.reflection.pause`) remembers the setup of the worker whose run
failed in a way a user must fix (a refused key, an unknown model). The job carries it;
a worker whose setup is the same skips an automatic run (``configuration_error``), and one
whose setup differs — the key was fixed, or this host has another — runs it, which lifts
the pause when the daemon hears how it went. The retry backoff is the daemon's: it does
not send a job that must wait.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from shared.reflection.job import JobInput
from shared.reflection.pause import describe, setup_digest
from shared.settings import Settings

log = structlog.get_logger(__name__)

Skip = tuple[str, str]
"""A gate that closed: the outcome's reason and its message."""


def model_setup(
    settings: Settings, model: str, window: int | None, credentials: Iterable[str] = ()
) -> str:
    """The digest of what the sub-agent's model calls depend on on this host: the job's
    model string and window, the api base and the credentials (``credentials``: the
    worker's provider keys)."""
    return setup_digest([model, settings.api_base, window, settings.api_key, *credentials])


def paused(job: JobInput, setup: str) -> Skip | None:
    """Why an automatic run of ``job`` must not start on a worker with ``setup``, or None."""
    pause = job.pause
    if pause is None or job.request.trigger == "manual":
        return None
    if pause.setup != setup:
        log.info("reflection_pause_lifted", reason=pause.reason, why="the model setup changed")
        return None
    text = describe(pause, job.agent_name)
    return "configuration_error", text[0].upper() + text[1:]
