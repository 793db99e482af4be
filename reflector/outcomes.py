"""Recording a job's outcome: on disk first (``reflections/log.jsonl``), then on Redis
(the outcome stream the daemon listens to, and the job's terminal state that makes a
redelivered job a no-op). Either may fail without the other: the daemon reads the disk
when Redis lost an outcome, and Redis when the disk could not take it."""

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
    line = (outcome.model_dump_json() + "\n").encode()
    try:
        reflections_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(reflections_dir / "log.lock"):
            fd = os.open(
                reflections_dir / "log.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
            )
            try:
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


def publish_outcome(client: redis.Redis | None, job_id: str, outcome: ReflectionOutcome) -> None:
    """Publish, and remember the job as finished unless it only found the agent busy
    (then the job that holds the agent is still to report, and this one may run again)."""
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
