"""Publishing a job's outcome on Redis, after it was appended to the log on disk
(:func:`shared.reflection.events.append`): the outcome stream the daemon listens to, and
the job's terminal state that makes a redelivered job a no-op. Either may fail without the
other: the daemon reads the disk when Redis lost an outcome, and Redis when the disk could
not take it."""

from __future__ import annotations

import redis
import structlog

from shared.coordination import keys
from shared.models.reflection import ReflectionOutcome
from shared.reflection import events

log = structlog.get_logger(__name__)


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
            events.OUTCOME_STREAM,
            events.stream_fields(outcome),  # type: ignore[arg-type]
            maxlen=events.OUTCOME_STREAM_MAXLEN,
            approximate=True,
        )
        pipe.execute()
    except redis.RedisError as exc:
        log.warning(
            "outcome_not_published",
            error=str(exc),
            hint="the daemon reads it from the outcome log on disk instead",
        )
