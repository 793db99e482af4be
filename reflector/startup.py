"""Start-up of a worker: requeue what a dead worker held, sweep orphans of agents no live
job works on, announce itself while it runs.

A worker killed mid-job leaves a worktree and a ``reflection/*`` branch behind. Each job
sweeps its own agent before it launches; at start-up a worker also sweeps every agent
whose reflection lease is free (a held lease means a live job elsewhere owns what it
finds, so that agent is left alone). A worktree whose job still renews its liveness key
is never removed, and without Redis to ask nothing is.

The announcement is a key with a short TTL, refreshed by a thread: ``agentctl status``
lists the keys, so a worker killed with -9 drops off the list within
:data:`keys.WORKER_TTL_S`, and one that stops cleanly deletes its key at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid

import redis
import structlog

from reflector.checkout import sweep_orphans
from shared.coordination import keys
from shared.coordination.broker import RedisLocation, locate
from shared.coordination.lease import ReflectionLease, live_reflection_ids
from shared.errors import AgentdError
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


def sweep_idle_agents(settings: Settings) -> list[str]:
    layout = Layout(settings.home)
    client = redis.Redis.from_url(locate(settings).redis_url)
    removed: list[str] = []
    try:
        for agent in AgentStore(layout).list():
            lease = ReflectionLease(
                client,
                agent.id,
                owner=f"startup-{uuid.uuid4().hex[:8]}",
                ttl_s=settings.reflection_lease_s,
            )
            try:
                if not lease.acquire():
                    continue
            except redis.RedisError as exc:
                log.warning("startup_sweep_skipped", error=str(exc))
                return removed
            try:
                removed += sweep_orphans(
                    layout.memory_dir(agent.id),
                    layout.reflection_files(agent.id).worktrees,
                    live_reflection_ids(client, agent.id),
                )
            except redis.RedisError as exc:
                log.warning("startup_sweep_skipped", agent_id=agent.id, error=str(exc))
            except AgentdError as exc:
                log.warning("startup_sweep_failed", agent_id=agent.id, error=exc.message)
            finally:
                lease.release()
    finally:
        client.close()
    return removed


def restore_unacked(location: RedisLocation) -> None:
    """Requeue every message a dead worker left unacked (single-node deployments)."""
    import kombu

    with kombu.Connection(
        location.celery_url, transport_options={"visibility_timeout": 0}
    ) as connection:
        connection.default_channel.qos.restore_visible(num=None)


class Heartbeat:
    """Keeps ``agentd:worker:<name>:<pid>`` alive while this worker runs, and withdraws it
    when the worker stops."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, hostname: str | None) -> None:
        name = hostname or f"reflector@{os.uname().nodename}"
        key = keys.worker(f"{name}:{os.getpid()}")
        info = json.dumps({"name": name, "pid": os.getpid(), "started_at": time.time()})
        self._thread = threading.Thread(
            target=self._beat, args=(key, info), name="worker-heartbeat", daemon=True
        )
        self._thread.start()

    def _beat(self, key: str, info: str) -> None:
        client = redis.Redis.from_url(
            self.redis_url,
            socket_timeout=keys.WORKER_HEARTBEAT_S,
            socket_connect_timeout=keys.WORKER_HEARTBEAT_S,
        )
        try:
            while not self._stopped.is_set():
                with contextlib.suppress(redis.RedisError):
                    client.set(key, info, ex=keys.WORKER_TTL_S)
                self._stopped.wait(keys.WORKER_HEARTBEAT_S)
            with contextlib.suppress(redis.RedisError):
                client.delete(key)  # after the last SET: the same thread, so none follows
        finally:
            client.close()

    def stop(self) -> None:
        """Stop beating and withdraw the key: a worker that stopped is gone from status."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(2 * keys.WORKER_HEARTBEAT_S + 1)
