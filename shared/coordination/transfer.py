"""A job's inputs and its answer, held in Redis between the daemon and a worker.

The daemon puts a job's :class:`~shared.reflection.job.JobInput` and memory bundle under
keys named by the input's id (:data:`~shared.coordination.redis_keys.JOB_BLOB_TTL_S`), then
sends the Celery message that names them. The worker that runs the job stores its
:class:`~shared.reflection.job.JobAnswer` and bundle the same way: the first answer for an
input wins (``SET NX``), so two copies of one job (a redelivery while the first still
ran) leave one answer, and the daemon merges one. Storing the answer also marks the job
``answered`` and announces it on :data:`ANSWER_STREAM`, in one transaction; the daemon
listens there, and asks the job's state when it missed an announcement.
"""

from __future__ import annotations

import json
import secrets

import redis

from shared.coordination import jobs, redis_keys
from shared.coordination.replies import all_bytes, as_bytes
from shared.reflection.job import JobAnswer, JobInput

ANSWER_STREAM = "agentd:reflection-answers"
ANSWER_STREAM_MAXLEN = 10_000
ANSWER_FIELD = "answer"
"""The stream entry's one field: ``{"job_id", "input_id", "agent_id"}``, or a whole
answer that is only a notice (``skipped: already_active``, never stored)."""


def put_input(client: redis.Redis, job: JobInput, bundle: bytes) -> None:
    pipe = client.pipeline()
    pipe.set(redis_keys.job_input_bundle(job.input_id), bundle, ex=redis_keys.JOB_BLOB_TTL_S)
    pipe.set(
        redis_keys.job_input(job.input_id), job.model_dump_json(), ex=redis_keys.JOB_BLOB_TTL_S
    )
    pipe.execute()


def has_input(client: redis.Redis, input_id: str) -> bool:
    return bool(
        client.exists(redis_keys.job_input(input_id), redis_keys.job_input_bundle(input_id)) == 2
    )


def get_input(client: redis.Redis, input_id: str) -> tuple[bytes, bytes] | None:
    """The input's JSON (parsed by the caller, who checks its format first) and bundle;
    None when Redis no longer holds them."""
    raw, bundle = all_bytes(
        client.mget(redis_keys.job_input(input_id), redis_keys.job_input_bundle(input_id))
    )
    if raw is None or bundle is None:
        return None
    return raw, bundle


def put_answer(client: redis.Redis, answer: JobAnswer, bundle: bytes | None) -> bool:
    """Store the answer unless one is stored already; whether this one was."""
    nonce = secrets.token_hex(6)
    stored = answer.model_dump(mode="json")
    if bundle is not None:
        stored["bundle_key"] = redis_keys.job_answer_bundle(answer.input_id, nonce)
        client.set(stored["bundle_key"], bundle, ex=redis_keys.JOB_BLOB_TTL_S)
    if not client.set(
        redis_keys.job_answer(answer.input_id),
        json.dumps(stored),
        nx=True,
        ex=redis_keys.JOB_BLOB_TTL_S,
    ):
        if bundle is not None:
            client.delete(stored["bundle_key"])
        return False
    pipe = client.pipeline()
    jobs.mark_answered(pipe, answer.job_id, answer.input_id)
    pipe.xadd(
        ANSWER_STREAM,
        {ANSWER_FIELD: notice(answer)},
        maxlen=ANSWER_STREAM_MAXLEN,
        approximate=True,
    )
    pipe.execute()
    return True


def announce(client: redis.Redis, answer: JobAnswer) -> None:
    """Tell the daemon of an answer that settles nothing (it is logged, not stored)."""
    client.xadd(
        ANSWER_STREAM,
        {ANSWER_FIELD: answer.model_dump_json()},
        maxlen=ANSWER_STREAM_MAXLEN,
        approximate=True,
    )


def notice(answer: JobAnswer) -> str:
    return json.dumps(
        {"job_id": answer.job_id, "input_id": answer.input_id, "agent_id": answer.agent_id}
    )


def get_answer(client: redis.Redis, input_id: str) -> tuple[bytes, bytes | None] | None:
    """The stored answer's JSON and its bundle (None when it committed nothing); None when
    there is no answer, or its bundle is gone."""
    raw = as_bytes(client.get(redis_keys.job_answer(input_id)))
    if raw is None:
        return None
    bundle_key = _bundle_key(raw, input_id)
    if bundle_key is None:
        return raw, None
    bundle = as_bytes(client.get(bundle_key))
    return None if bundle is None else (raw, bundle)


def _bundle_key(raw: bytes, input_id: str) -> str | None:
    """Where an answer says its bundle is: only ever a key of this input's answers (an
    answer naming another key, another job's inputs say, names none)."""
    try:
        named = json.loads(raw).get("bundle_key")
    except (ValueError, AttributeError):
        return None
    ours = redis_keys.job_answer_bundle(input_id, "")
    return named if isinstance(named, str) and named.startswith(ours) else None


def drop(client: redis.Redis, input_id: str) -> None:
    """Forget a job's inputs and answer (its outcome is recorded)."""
    doomed = [
        redis_keys.job_input(input_id),
        redis_keys.job_input_bundle(input_id),
        redis_keys.job_answer(input_id),
    ]
    raw = as_bytes(client.get(redis_keys.job_answer(input_id)))
    bundle_key = _bundle_key(raw, input_id) if raw is not None else None
    client.delete(*doomed, *([bundle_key] if bundle_key else []))
