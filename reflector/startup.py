"""Start-up of a worker: requeue what a dead worker held, clear the scratch its dead jobs
left, announce itself while it runs.

A worker touches nothing of the daemon's: what a job killed mid-run leaves is its own
scratch directory (:mod:`reflector.scratch`), cleared by the next worker to start on the
host, and a job Redis still calls running, which the daemon sends again once its lease
has expired. Memory itself never holds a worker's leftovers, since only the daemon
writes it.

The announcement is a key with a short TTL, refreshed by a thread: ``agentctl status``
lists the keys — each worker with its host, its agentd version and the job format it
reads — so a worker killed with -9 drops off the list within :data:`redis_keys.WORKER_TTL_S`,
and one that stops cleanly deletes its key at once.
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


def restore_unacked(location: RedisLocation) -> None:
    """Requeue every message a dead worker left unacked (single-node deployments)."""
    import kombu

    with kombu.Connection(
        location.celery_url,
        ssl=location.celery_ssl or False,
        transport_options={"visibility_timeout": 0},
    ) as connection:
        connection.default_channel.qos.restore_visible(num=None)


class Heartbeat:
    """Keeps ``agentd:worker:<name>:<pid>`` alive while this worker runs, and withdraws it
    when the worker stops."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
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
        client = redis.Redis.from_url(
            self.redis_url,
            socket_timeout=redis_keys.WORKER_HEARTBEAT_S,
            socket_connect_timeout=redis_keys.WORKER_HEARTBEAT_S,
        )
        try:
            while not self._stopped.is_set():
                with contextlib.suppress(redis.RedisError):
                    client.set(key, info, ex=redis_keys.WORKER_TTL_S)
                self._stopped.wait(redis_keys.WORKER_HEARTBEAT_S)
            with contextlib.suppress(redis.RedisError):
                client.delete(key)  # after the last SET: the same thread, so none follows
        finally:
            client.close()

    def stop(self) -> None:
        """Stop beating and withdraw the key: a worker that stopped is gone from status."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(2 * redis_keys.WORKER_HEARTBEAT_S + 1)
