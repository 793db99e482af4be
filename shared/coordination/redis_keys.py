"""Every Redis key agentd uses and the lifetime of the keys a job leaves, in one place, each
with why it is what it is. The lease's TTL and the heartbeat's are settings
(:class:`~shared.settings.Settings`)."""

from __future__ import annotations

PREFIX = "agentd"

REFLECTION_QUEUE = "reflection-jobs"
"""The Celery queue reflection jobs go to. (Workers of agentd before jobs carried their
inputs listened on ``reflector``: they take none of these jobs, which they could not run.)"""
REFLECT_TASK = "reflector.reflect"
"""The task name the daemon sends by name: it never imports worker code."""

JOB_STATE_TTL_S = 7 * 24 * 3600
"""A job's state (queued, running, then its outcome) and its try count are kept a week:
long enough to make any redelivery a no-op, and for the daemon to tell after a restart
whether Redis still knows a job it sent. (Not a timeout anything waits on: a key's
lifetime, like :data:`JOB_BLOB_TTL_S`. The timeouts are settings: the lease's, the
worker heartbeat's and every client's, ``AGENTD_REDIS_TIMEOUT_S``.)"""


def worker(name: str) -> str:
    return f"{PREFIX}:worker:{name}"


WORKER_PATTERN = f"{PREFIX}:worker:*"
LEASE_PATTERN = f"{PREFIX}:reflection-lease:*"


def lease(agent_id: str) -> str:
    return f"{PREFIX}:reflection-lease:{agent_id}"


def job_state(job_id: str) -> str:
    return f"{PREFIX}:job:{job_id}"


def job_tries(job_id: str) -> str:
    return f"{PREFIX}:job-tries:{job_id}"


JOB_BLOB_TTL_S = 24 * 3600
"""A job's inputs and its answer (memory bundles among them) are kept a day: long past the
time a job may run or wait for a worker, and gone by themselves if the daemon never comes
back for them. The daemon deletes them once it has recorded the job's outcome; inputs it
finds gone it builds again."""


def job_input(input_id: str) -> str:
    return f"{PREFIX}:job-input:{input_id}"


def job_input_bundle(input_id: str) -> str:
    return f"{PREFIX}:job-input-bundle:{input_id}"


def job_answer(input_id: str) -> str:
    return f"{PREFIX}:job-answer:{input_id}"


def job_answer_bundle(input_id: str, nonce: str) -> str:
    """A worker's bundle, named by a nonce of its own: a copy whose answer came second
    writes no bundle over the first one's."""
    return f"{PREFIX}:job-answer-bundle:{input_id}:{nonce}"
