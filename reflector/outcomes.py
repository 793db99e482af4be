"""Recording a job's outcome: on disk first (``reflections/log.jsonl``), then on Redis
(the outcome stream the daemon listens to, and the job's terminal state that makes a
redelivered job a no-op)."""

from __future__ import annotations

import os
from pathlib import Path

import redis
import structlog

from shared.coordination import keys
from shared.models.reflection import ReflectionOutcome
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)


def append_outcome(reflections_dir: Path, outcome: ReflectionOutcome) -> None:
    reflections_dir.mkdir(parents=True, exist_ok=True)
    line = (outcome.model_dump_json() + "\n").encode()
    with file_lock(reflections_dir / "log.lock"):
        fd = os.open(reflections_dir / "log.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def publish_outcome(client: redis.Redis | None, job_id: str, outcome: ReflectionOutcome) -> None:
    """Publish, and remember the job as finished unless it only coalesced into a follow-up
    (the follow-up reuses the request, and must run)."""
    if client is None:
        return
    payload = outcome.model_dump_json()
    try:
        pipe = client.pipeline()
        if outcome.reason != "already_active":
            pipe.set(keys.job_state(job_id), payload, ex=keys.JOB_STATE_TTL_S)
        pipe.xadd(
            keys.OUTCOME_STREAM,
            {"outcome": payload},
            maxlen=keys.OUTCOME_STREAM_MAXLEN,
            approximate=True,
        )
        pipe.execute()
    except redis.RedisError as exc:
        log.warning(
            "outcome_not_published",
            error=str(exc),
            hint="the daemon reads it from reflections/log.jsonl instead",
        )


def finished_outcome(client: redis.Redis | None, job_id: str) -> ReflectionOutcome | None:
    """The outcome of a job that already finished (a redelivery), if Redis remembers it."""
    if client is None:
        return None
    try:
        raw = client.get(keys.job_state(job_id))
    except redis.RedisError:
        return None
    return ReflectionOutcome.model_validate_json(raw) if raw else None
