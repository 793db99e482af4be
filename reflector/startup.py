"""Start-up of a worker: sweep orphans of agents no live job works on; announce itself.

A worker killed mid-job leaves a worktree and a ``reflection/*`` branch behind. Each job
sweeps its own agent before it launches; at start-up a worker also sweeps every agent
whose reflection lease is free (a held lease means a live job elsewhere owns what it
finds, so that agent is left alone). A worktree whose job still renews its liveness key
is never removed, and without Redis to ask nothing is.
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

from reflector.worktree import sweep_orphans
from shared.coordination import keys
from shared.coordination.broker import locate
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
                    layout.reflections_dir(agent.id) / "worktrees",
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


def start_heartbeat(redis_url: str, consumer: object) -> threading.Thread:
    """Keep ``agentd:worker:<name>`` alive while this worker runs (``agentctl status``)."""
    hostname = getattr(consumer, "hostname", None) or f"reflector@{os.uname().nodename}"
    key = keys.worker(f"{hostname}:{os.getpid()}")
    info = json.dumps({"name": hostname, "pid": os.getpid(), "started_at": time.time()})

    def beat() -> None:
        client = redis.Redis.from_url(redis_url)
        while True:
            with contextlib.suppress(redis.RedisError):
                client.set(key, info, ex=keys.WORKER_TTL_S)
            time.sleep(keys.WORKER_HEARTBEAT_S)

    thread = threading.Thread(target=beat, name="worker-heartbeat", daemon=True)
    thread.start()
    return thread
