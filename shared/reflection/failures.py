"""The reason code of a reflection job that raised, on either side of Redis."""

from __future__ import annotations

import errno
import subprocess

import redis

from shared.errors import AgentdError


def failure_reason(exc: BaseException) -> str:
    """The outcome reason for a job that raised ``exc``."""
    if isinstance(exc, AgentdError):
        return exc.code
    if isinstance(exc, redis.RedisError):
        return "redis_unavailable"
    if isinstance(exc, subprocess.SubprocessError):
        return "subprocess_failed"
    if isinstance(exc, OSError):
        return "disk_full" if exc.errno == errno.ENOSPC else "os_error"
    return "internal_error"
