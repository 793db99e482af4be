"""Errors of a reflection job: what a worker was sent or sent back cannot be landed.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class ReflectionError(AgentdError):
    code = "reflection_error"


class TooManyCommits(ReflectionError):
    """A reflection's branch holds more new commits than one job may land; each is rebuilt
    under the harness's identity (:mod:`shared.memory.signing`), so there is a bound."""

    code = "too_many_commits"


class BundleError(ReflectionError):
    """A git bundle that is not one: damaged, cut short, or not what it says it holds (a
    job's memory, a worker's commits)."""

    code = "bundle_corrupt"


class JobTooLarge(ReflectionError):
    """A job's memory or a worker's answer over ``AGENTD_REFLECTION_JOB_MAX_BYTES``."""

    code = "job_too_large"


class InvalidAnswer(ReflectionError):
    """A worker's answer that does not hold together: commits it claims and does not
    carry, carries and does not claim, that do not build on the memory it was sent, or
    objects and refs nobody asked for. Nothing of it is merged."""

    code = "invalid_answer"


class WorkerOutdated(ReflectionError):
    """A job in a format the worker does not know: the worker runs an older agentd."""

    code = "worker_outdated"
