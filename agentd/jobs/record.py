"""A job's outcome, recorded by the daemon: in the agent's outcome log on disk first, then
as the job's state in Redis (a redelivery of the job is then a no-op), and its inputs and
answer dropped from Redis. Either may fail without the other: the daemon reads the disk
when Redis lost a job's state."""

from __future__ import annotations

import redis
import structlog

from shared.coordination import jobs, transfer
from shared.models.reflection import ReflectionOutcome
from shared.reflection import events
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


def record(
    layout: Layout,
    outcome: ReflectionOutcome,
    client: redis.Redis | None,
    input_id: str | None = None,
) -> None:
    """Record ``outcome``; an agent deleted meanwhile keeps nothing (its directory is gone
    and is not made again)."""
    if layout.agent_dir(outcome.agent_id).is_dir():
        events.append(layout.reflections_dir(outcome.agent_id), outcome)
    if client is None or not events.answers_request(outcome):
        return
    try:
        jobs.record_outcome(client, outcome.request_id, outcome)
        if input_id is not None:
            transfer.drop(client, input_id)
    except redis.RedisError as exc:
        log.warning(
            "outcome_not_published",
            error=str(exc),
            hint="the daemon reads it from the outcome log on disk instead",
        )
