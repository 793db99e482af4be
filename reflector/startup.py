"""Start-up of a worker: clear the scratch its dead jobs left, announce itself while it runs.

A worker touches nothing of the daemon's: what a job killed mid-run leaves is its own
scratch directory (:mod:`reflector.scratch`), cleared by the next worker to start on the
host, and a job Redis still calls running, which the daemon sends again once its lease
has expired (a starting worker requeues nothing: the daemon alone sends a job again).
Memory itself never holds a worker's leftovers, since only the daemon writes it.

The announcement is a key with a short TTL, refreshed by a thread: ``agentctl status``
lists the keys — each worker with its host, its agentd version and the job format it
reads — so a worker killed with -9 drops off the list within :data:`BEATS_KEPT` beats
(``AGENTD_WORKER_HEARTBEAT_S``), and one that stops cleanly deletes its key at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import redis
import structlog

from shared.coordination import redis_keys
from shared.coordination.broker import RedisLocation
from shared.reflection.job import JOB_FORMAT

log = structlog.get_logger(__name__)


BEATS_KEPT = 4
"""A worker's key outlives its last beat by this many beats: three missed beats (a cheap
SET from an otherwise idle main process) do not drop a live worker from the list."""


class Heartbeat:
    """Keeps ``agentd:worker:<name>:<pid>`` alive while this worker runs, and withdraws it
    when the worker stops."""

    def __init__(self, location: RedisLocation, every_s: float) -> None:
        self.location = location
        self.every_s = every_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, hostname: str | None, version: str, concurrency: int | None) -> None:
        name = hostname or f"reflector@{os.uname().nodename}"
        key = redis_keys.worker(f"{name}:{os.getpid()}")
        info = json.dumps(
            {
                "name": name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": version,
                "format": JOB_FORMAT,
                "concurrency": concurrency,
                "started_at": time.time(),
            }
        )
        self._thread = threading.Thread(
            target=self._beat, args=(key, info), name="worker-heartbeat", daemon=True
        )
        self._thread.start()

    def _beat(self, key: str, info: str) -> None:
        client = self.location.client()
        kept_ms = max(1, round(BEATS_KEPT * self.every_s * 1000))
        try:
            while not self._stopped.is_set():
                with contextlib.suppress(redis.RedisError):
                    client.set(key, info, px=kept_ms)
                self._stopped.wait(self.every_s)
            with contextlib.suppress(redis.RedisError):
                client.delete(key)  # after the last SET: the same thread, so none follows
        finally:
            client.close()

    def stop(self) -> None:
        """Stop beating and withdraw the key: a worker that stopped is gone from status."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(self.every_s + 2 * self.location.timeout_s)
