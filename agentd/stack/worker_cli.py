"""``agentd worker``: reflection workers alone, pointed at a Redis on this host or another.

A worker needs nothing but Redis and its own model settings (a job carries everything
else: :mod:`reflector.work`), so this is all a second host runs:
``AGENTD_REDIS_URL=redis://:PASSWORD@HOST:6379/0 agentd worker --concurrency 4``. Before
Celery starts, Redis is asked once, so a wrong password, an unreachable host or a failed
TLS handshake is one clear line and exit 1 rather than a worker retrying in its log
forever; a worker directory inside ``AGENTD_HOME`` is refused (exit 2): a worker writes
nothing of the daemon's home.

The worker process is Celery itself, executed in place of this one (one process for a
service manager to watch). Provider keys do not go with it in the environment, where
``/proc/<pid>/environ`` shows them: they are handed over on a descriptor, as ``agentd up``
hands them to its workers (:mod:`shared.providers.credentials`).
"""

from __future__ import annotations

import os
import sys

from agentd.stack.supervisor import worker_command
from shared.coordination.broker import locate, reach
from shared.providers.credentials import HANDOFF_VARIABLE, hand_over, is_key_name
from shared.settings import Settings

DEFAULT_NAME = "reflector"


def worker_problem(settings: Settings) -> tuple[int, str] | None:
    """What keeps a worker from starting with ``settings`` (an exit code and a line), or
    None."""
    worker_dir = settings.worker_dir.absolute().resolve()
    if worker_dir.is_relative_to(settings.home.absolute().resolve()):
        return 2, (
            f"AGENTD_WORKER_DIR ({settings.worker_dir}) is inside AGENTD_HOME "
            f"({settings.home}); a worker writes nothing of the daemon's home: point it "
            "elsewhere"
        )
    try:
        location = locate(settings)
    except ValueError as exc:
        return 2, str(exc)
    problem = reach(location)
    return None if problem is None else (1, problem)


def run_worker(settings: Settings, *, concurrency: int, name: str) -> int:
    """Check, then become the Celery worker; returns only when it cannot start."""
    problem = worker_problem(settings)
    if problem is not None:
        code, text = problem
        print(f"agentd worker: {text}", file=sys.stderr)
        return code
    argv = worker_command(name, settings.log_level, concurrency)
    env = {name: value for name, value in os.environ.items() if not is_key_name(name)}
    keys = {name: value for name, value in os.environ.items() if is_key_name(name)}
    if keys:
        fd = hand_over(keys)
        os.set_inheritable(fd, True)
        env[HANDOFF_VARIABLE] = str(fd)
    sys.stdout.flush()
    os.execve(argv[0], argv, env)
    return 1  # not reached: execve replaces this process
