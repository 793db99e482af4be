"""The reflection lease: one reflection per agent across every worker and host, and the one
answer to "is this job's worker still alive?".

A Redis lock with a TTL (``AGENTD_REFLECTION_LEASE_S``) that its holder renews from a
background thread. A worker that dies (even ``kill -9``, or its host gone) stops renewing,
and the agent is free again within the TTL; the daemon then finds the job lost
(:func:`shared.coordination.jobs.status`) and sends it again. ``thread_local=False``
because the renewal runs in another thread than the acquire (redis-py's default
thread-local token breaks exactly that). A renewal is retried through a Redis that is
away for a moment; one that finds the lock gone or taken stops. The lease is no fence for
memory: a worker merges nothing, and the daemon, the one writer, takes the first answer.

The lease's value names its holder's host and process. Redis persists the lease, so after
a crash of every process at once it would outlive its dead holder by up to its TTL and
keep the agent's reflection waiting; a holder that is a dead process on this host is known
dead at once, and its lease is taken over (compare-and-delete, so a live holder that just
renewed is never robbed). A holder on another host is trusted until the TTL says otherwise.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from types import TracebackType

import redis
import structlog
from redis.exceptions import LockError, LockNotOwnedError

from shared.coordination import redis_keys
from shared.coordination.replies import as_bytes

log = structlog.get_logger(__name__)

_DELETE_IF_EQUAL = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class ReflectionLease:
    def __init__(
        self,
        client: redis.Redis,
        agent_id: str,
        owner: str,
        ttl_s: int,
    ) -> None:
        self._client = client
        self._lock = client.lock(
            redis_keys.lease(agent_id), timeout=ttl_s, blocking=False, thread_local=False
        )
        self._key = redis_keys.lease(agent_id)
        self._ttl_s = ttl_s
        self._renew_every_s = max(1.0, ttl_s / 4)
        self._owner = f"{owner} {socket.gethostname()} {os.getpid()}"
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> bool:
        """Take the lease if nobody alive holds it."""
        if not self._try_acquire():
            return False
        self._renewer = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self._renewer.start()
        return True

    def _try_acquire(self) -> bool:
        if self._lock.acquire(token=self._owner):
            return True
        return _take_from_dead_holder(self._client, self._key) and bool(
            self._lock.acquire(token=self._owner)
        )

    def _renew(self) -> None:
        """Renew until released; through a Redis that is away for a moment (a restart keeps
        the lease, and the renewal after it keeps the job alive), not past a lease that
        another holder took or that expired."""
        failing = False
        while not self._stop.wait(self._renew_every_s):
            try:
                self._lock.reacquire()
                failing = False
            except LockError as exc:
                log.error("reflection_lease_lost", error=str(exc))
                return
            except redis.RedisError as exc:
                if not failing:
                    log.warning("reflection_lease_not_renewed", error=str(exc))
                failing = True

    def holder(self) -> str | None:
        """The owner named by whoever holds the agent's lease now (a job id, for a job),
        or None when it is free: a job that finds itself the holder is a redelivered copy
        of a job that is still running."""
        token = as_bytes(self._client.get(self._key))
        return token.decode(errors="replace").split(" ", 1)[0] if token else None

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(5)
        try:
            self._lock.release()
        except LockNotOwnedError:
            log.warning("reflection_lease_expired_before_release")
        except (LockError, redis.RedisError):
            pass

    def __enter__(self) -> ReflectionLease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def holder_alive(client: redis.Redis, agent_id: str) -> bool:
    """Whether someone holds the agent's lease who may still be alive."""
    token = as_bytes(client.get(redis_keys.lease(agent_id)))
    return token is not None and not _dead(token)


def _take_from_dead_holder(client: redis.Redis, key: str) -> bool:
    token = as_bytes(client.get(key))
    if token is None or not _dead(token):
        return False
    taken = bool(client.eval(_DELETE_IF_EQUAL, 1, key, token))
    if taken:
        log.warning(
            "reflection_lease_taken_from_dead_holder", holder=token.decode(errors="replace")
        )
    return taken


def _dead(token: bytes) -> bool:
    """A holder that is a process of this host which no longer runs (gone, or a zombie
    nobody reaped: a killed worker's pool child is reparented to an init that may never
    reap it, and a zombie still answers ``kill -0``)."""
    parts = token.decode(errors="replace").split()
    if len(parts) != 3 or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return False
    if not Path("/proc/self/stat").exists():
        return False  # no /proc: trust the TTL
    try:
        stat = Path(f"/proc/{parts[2]}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
