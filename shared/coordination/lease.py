"""The reflection lease: one reflection per agent across every worker and host.

A Redis lock with a TTL that its holder renews from a background thread. A worker that
dies (even ``kill -9``) stops renewing, and the agent is free again within
:data:`~shared.coordination.keys.LEASE_TTL_S`. ``thread_local=False`` because the renewal
runs in another thread than the acquire (redis-py's default thread-local token breaks
exactly that). A renewal that fails for any reason — the lock taken over, or Redis gone —
marks the lease lost: the holder may no longer be the only reflection of its agent, so it
must not merge. Merges into the parent repo are additionally serialised by the agent's
memory *file* lock, which the daemon shares; the lease is not a fence by itself.

The holder may name a key to keep alive with the lease (its worktree's liveness marker),
so that others can tell its work from a dead job's leftovers.

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
import time
from pathlib import Path
from types import TracebackType

import redis
import structlog
from redis.exceptions import LockError, LockNotOwnedError

from shared.coordination import keys

log = structlog.get_logger(__name__)

ACQUIRE_POLL_S = 0.1

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
        ttl_s: int = keys.LEASE_TTL_S,
        *,
        alive_key: str | None = None,
    ) -> None:
        self._client = client
        self._lock = client.lock(
            keys.lease(agent_id), timeout=ttl_s, blocking=False, thread_local=False
        )
        self._key = keys.lease(agent_id)
        self._ttl_s = ttl_s
        self._renew_every_s = max(1.0, ttl_s / 4)
        self._owner = f"{owner} {socket.gethostname()} {os.getpid()}"
        self._alive_key = alive_key
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost = False
        """Set when a renewal failed: another holder may have the agent now."""

    def acquire(self, wait_s: float = 0.0) -> bool:
        """Take the lease, waiting up to ``wait_s`` for a holder that is about to let go
        (a worker's start-up sweep holds each agent's lease for milliseconds)."""
        deadline = time.monotonic() + wait_s
        while not self._try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(ACQUIRE_POLL_S)
        self._keep_alive()
        self._renewer = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self._renewer.start()
        return True

    def _try_acquire(self) -> bool:
        if self._lock.acquire(token=self._owner):
            return True
        return _take_from_dead_holder(self._client, self._key) and bool(
            self._lock.acquire(token=self._owner)
        )

    def _keep_alive(self) -> None:
        if self._alive_key is not None:
            self._client.set(self._alive_key, self._owner, ex=self._ttl_s)

    def _renew(self) -> None:
        while not self._stop.wait(self._renew_every_s):
            try:
                self._lock.reacquire()
                self._keep_alive()
            except (LockError, redis.RedisError) as exc:
                self.lost = True
                log.error("reflection_lease_lost", error=str(exc))
                return

    def holder(self) -> str | None:
        """The owner named by whoever holds the agent's lease now (a job id, for a job),
        or None when it is free: a job that finds itself the holder is a redelivered copy
        of a job that is still running."""
        token = self._client.get(self._key)
        return token.decode(errors="replace").split(" ", 1)[0] if token else None

    def still_held(self) -> bool:
        if self.lost:
            return False
        try:
            return bool(self._lock.owned())
        except redis.RedisError as exc:
            log.error("reflection_lease_unverifiable", error=str(exc))
            return False

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(5)
        try:
            if self._alive_key is not None:
                self._client.delete(self._alive_key)
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


def live_reflection_ids(client: redis.Redis, agent_id: str) -> set[str]:
    """Reflection ids whose job is alive (its lease is being renewed) for ``agent_id``.

    Raises ``redis.RedisError`` when Redis cannot say: then nothing may be swept."""
    prefix = keys.live_reflection(agent_id, "")
    return {
        key.decode().removeprefix(prefix)
        for key in client.scan_iter(match=keys.live_reflections_pattern(agent_id))
    }


def holder_alive(client: redis.Redis, agent_id: str) -> bool:
    """Whether someone holds the agent's lease who may still be alive."""
    token = client.get(keys.lease(agent_id))
    return token is not None and not _dead(token)


def _take_from_dead_holder(client: redis.Redis, key: str) -> bool:
    token = client.get(key)
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
