"""What Redis knows about one reflection job: queued, running, answered, or finished with
an outcome.

The daemon marks a job ``queued`` before it hands it to Celery; the worker marks it
``running`` once it holds the agent's lease, and ``answered`` when it stores its answer
(:mod:`shared.coordination.transfer`), before it lets the lease go; the daemon stores the
outcome once it has merged what the answer brought. After a crash the daemon asks, and a
job is sent again at once when Redis does not know it (its state went with a Redis that
lost its data) or when it is *lost*: neither answered nor finished, and no live process
holds its agent's lease. A running job holds the lease from before it says "running"
until after its answer is stored; a queued one that is neither in the queue nor holding
the lease after a grace (as long as a lease lasts) never got going. That is the job whose
worker was killed (a pool process or the whole worker, on this host or another), or whose
worker died between taking its message and taking the lease. This is the one way a lost
job comes back: Celery acknowledges a message as a worker starts it and never hands it
out again by itself.

A job may run twice (sent again while a worker cut off from Redis still ran it), so a
stored answer or outcome also turns a second copy into a no-op, and the try count stops a
job that keeps killing its worker.
"""

from __future__ import annotations

import json
import time
from typing import Literal

import redis
import structlog
from pydantic import BaseModel, ValidationError

from shared.coordination import redis_keys
from shared.coordination.lease import holder_alive
from shared.coordination.replies import as_bytes
from shared.models.reflection import ReflectionOutcome

log = structlog.get_logger(__name__)

Known = Literal["unknown", "queued", "running", "answered", "lost"]


class JobState(BaseModel):
    state: Literal["queued", "running", "answered"]
    at: float
    """When it was queued, started or answered (Unix time)."""
    input_id: str | None = None
    """For ``answered``: the inputs the answer is for."""


def mark(client: redis.Redis, job_id: str, state: Literal["queued", "running"]) -> None:
    """Record a job as queued or running unless it already finished."""
    key = redis_keys.job_state(job_id)
    if isinstance(_parse(as_bytes(client.get(key))), ReflectionOutcome):
        return
    value = JobState(state=state, at=time.time()).model_dump_json()
    client.set(key, value, ex=redis_keys.JOB_STATE_TTL_S)


def mark_answered(pipe: redis.client.Pipeline, job_id: str, input_id: str) -> None:
    """Queue, on ``pipe``, the mark of a job whose answer for ``input_id`` is stored."""
    value = JobState(state="answered", at=time.time(), input_id=input_id)
    pipe.set(redis_keys.job_state(job_id), value.model_dump_json(), ex=redis_keys.JOB_STATE_TTL_S)


def record_outcome(client: redis.Redis, job_id: str, outcome: ReflectionOutcome) -> None:
    """Remember the job as finished with ``outcome``: a redelivery of it is a no-op."""
    client.set(
        redis_keys.job_state(job_id), outcome.model_dump_json(), ex=redis_keys.JOB_STATE_TTL_S
    )


def answered(client: redis.Redis, job_id: str) -> str | None:
    """The inputs a stored answer of the job is for, if it was answered."""
    found = _parse(as_bytes(client.get(redis_keys.job_state(job_id))))
    return found.input_id if isinstance(found, JobState) and found.state == "answered" else None


def finished(client: redis.Redis, job_id: str) -> ReflectionOutcome | None:
    found = _parse(as_bytes(client.get(redis_keys.job_state(job_id))))
    return found if isinstance(found, ReflectionOutcome) else None


def status(
    client: redis.Redis, job_id: str, agent_id: str, grace_s: float
) -> Known | ReflectionOutcome:
    """The job's outcome if it finished, else what Redis knows of it (see the module);
    ``grace_s`` is how long a queued job may be neither in the queue nor holding its lease
    (a worker took its message and is on its way to the lease) before it counts as lost."""
    found = _parse(as_bytes(client.get(redis_keys.job_state(job_id))))
    if found is None:
        return "unknown"
    if isinstance(found, ReflectionOutcome):
        return found
    if found.state == "answered":
        return "answered"
    if holder_alive(client, agent_id):
        return found.state
    if found.state == "running":
        return "lost"  # it took the lease before it said so, and keeps it until it is done
    if time.time() - found.at < grace_s or job_id in _queued_ids(client):
        return found.state
    return "lost"


def count_try(client: redis.Redis, job_id: str) -> int:
    """Count one more run of the job; the total so far, this one included."""
    key = redis_keys.job_tries(job_id)
    pipe = client.pipeline()
    pipe.incr(key)
    pipe.expire(key, redis_keys.JOB_STATE_TTL_S)
    tries, _ = pipe.execute()
    return int(tries)


def _queued_ids(client: redis.Redis) -> set[str]:
    """Task ids of the messages waiting in the reflection queue."""
    ids = set()
    for raw in client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1):
        try:
            ids.add(json.loads(raw)["headers"]["id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def _parse(raw: bytes | None) -> JobState | ReflectionOutcome | None:
    if raw is None:
        return None
    for model in (ReflectionOutcome, JobState):
        try:
            return model.model_validate_json(raw)
        except ValidationError:
            continue
    log.warning("job_state_unreadable", value=raw[:200])
    return None
