"""The reflection lease: one reflection per agent across every worker and host.

A Redis lock with a TTL that its holder renews from a background thread. A worker that
dies (even ``kill -9``) stops renewing, and the agent is free again within
:data:`~shared.coordination.keys.LEASE_TTL_S`. ``thread_local=False`` because the renewal
runs in another thread than the acquire (redis-py's default thread-local token breaks
exactly that). Merges into the parent repo are additionally serialised by the agent's
memory *file* lock, which the daemon shares; the lease is not a fence by itself.
"""

from __future__ import annotations

import threading
from types import TracebackType

import redis
import structlog
from redis.exceptions import LockError, LockNotOwnedError

from shared.coordination import keys

log = structlog.get_logger(__name__)


class ReflectionLease:
    def __init__(
        self, client: redis.Redis, agent_id: str, owner: str, ttl_s: int = keys.LEASE_TTL_S
    ) -> None:
        self._lock = client.lock(
            keys.lease(agent_id), timeout=ttl_s, blocking=False, thread_local=False
        )
        self._renew_every_s = max(1.0, ttl_s / 4)
        self._owner = owner
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost = False
        """Set when a renewal failed: another holder may have the agent now."""

    def acquire(self) -> bool:
        if not self._lock.acquire(token=self._owner):
            return False
        self._renewer = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self._renewer.start()
        return True

    def _renew(self) -> None:
        while not self._stop.wait(self._renew_every_s):
            try:
                self._lock.reacquire()
            except LockError as exc:
                self.lost = True
                log.error("reflection_lease_lost", error=str(exc))
                return

    def still_held(self) -> bool:
        return not self.lost and bool(self._lock.owned())

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(5)
        try:
            self._lock.release()
        except LockNotOwnedError:
            log.warning("reflection_lease_expired_before_release")
        except LockError:
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
