"""``agentctl status``: the daemon, Redis, the workers, the queue, and every agent's
reflection state, gathered in one request (fast: a few Redis round trips and small files).

The files are read in a thread and without the state locks (:func:`peek_state`): a worker
or a turn holding one never holds up ``status``, nor the event loop it runs on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from agentd.reflection.idle_sweep import load_marks
from agentd.reflection.outbox import outbox_dir
from agentd.stack.supervisor import up_is_running
from shared.coordination import redis_keys
from shared.coordination.broker import RedisLocation
from shared.errors import AgentdError
from shared.memory.content import MemoryLimits, notice, scan_checkout
from shared.memory.hand_edits import uncommitted_notice
from shared.memory.proposals import held_proposals
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.reflection import events, pause
from shared.reflection.backoff import load_backoff
from shared.reflection.job import JOB_FORMAT
from shared.reflection.policy import ReflectionSettings
from shared.reflection.state import peek_state
from shared.store.agents import AgentStore
from shared.store.approvals import waiting_calls
from shared.store.conversations import list_conversations
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


async def redis_status(location: RedisLocation, layout: Layout) -> dict[str, Any]:
    """Redis as the daemon sees it. ``state`` says why it is not reachable, so the user is
    told the truth: ``restarting`` (the embedded Valkey is down, but ``agentd up`` runs and
    restarts it), ``not_started`` (embedded, and no ``agentd up`` runs for this home: this
    daemon was started alone), ``unreachable`` (an external Redis)."""
    report: dict[str, Any] = {
        "url": location.redis_url,
        "embedded": location.embedded,
        "reachable": False,
        "latency_ms": None,
        "workers": [],
        "queue_depth": None,
        "reflections_running": [],
    }
    client = location.async_client()
    try:
        started = time.perf_counter()
        await client.ping()
        report["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        report["reachable"] = True
        workers = [key async for key in client.scan_iter(match=redis_keys.WORKER_PATTERN)]
        for raw in await client.mget(workers) if workers else []:
            if raw:
                report["workers"].append(worker_entry(json.loads(raw)))
        report["queue_depth"] = await client.llen(redis_keys.REFLECTION_QUEUE)
        leases = [key async for key in client.scan_iter(match=redis_keys.LEASE_PATTERN)]
        report["reflections_running"] = sorted(k.decode().rsplit(":", 1)[-1] for k in leases)
    except Exception as exc:  # unreachable Redis is a status, not an error
        report["error"] = str(exc)
    finally:
        await client.aclose()
    report["state"] = _state(report["reachable"], location, layout)
    return report


def worker_entry(announced: dict[str, Any]) -> dict[str, Any]:
    """A worker as its heartbeat announced it (name, host, pid, version, when it started
    in ISO 8601 like every time agentctl prints), and whether it reads this daemon's jobs:
    a worker of an older agentd takes none of them."""
    entry = {**announced, "current": announced.get("format") == JOB_FORMAT}
    started = announced.get("started_at")
    if isinstance(started, int | float):  # a heartbeat's epoch seconds: shown as every time is
        entry["started_at"] = datetime.fromtimestamp(started, UTC).isoformat()
    return entry


def _state(reachable: bool, location: RedisLocation, layout: Layout) -> str:
    if reachable:
        return "reachable"
    if not location.embedded:
        return "unreachable"
    return "restarting" if up_is_running(layout) else "not_started"


def agents_status(
    layout: Layout,
    store: AgentStore,
    settings_for: Callable[[AgentRecord], ReflectionSettings],
    default_model: str,
    limits: MemoryLimits | None = None,
) -> list[dict[str, Any]]:
    """Every agent's status; blocking (it reads their files), so run it in a thread."""
    return [
        agent_status(layout, record, settings_for(record), default_model, limits)
        for record in store.list()
    ]


def agent_status(
    layout: Layout,
    agent: AgentRecord,
    settings: ReflectionSettings,
    default_model: str,
    limits: MemoryLimits | None = None,
) -> dict[str, Any]:
    steps = 0
    for record in list_conversations(layout, agent.id):
        steps += peek_state(
            layout.conversation_dir(agent.id, record.id)
        ).steps_since_last_reflection
    outcomes = [
        o for o in events.read(layout.reflections_dir(agent.id), tail=20) if o.status != "skipped"
    ]
    last = outcomes[-1] if outcomes else None
    backoff = load_backoff(layout.reflections_dir(agent.id))
    outbox = outbox_dir(layout, agent.id)
    swept = load_marks(layout, agent.id).last()
    return {
        "id": agent.id,
        "name": agent.name,
        "model": agent.model or default_model,
        "reflection": settings.public(),
        "steps_since_last_reflection": steps,
        "last_reflection": None
        if last is None
        else {
            "id": last.reflection_id,
            "status": last.status,
            "reason": last.reason,
            "finished_at": last.finished_at.isoformat(),
            "message": last.message,
        },
        "backoff_until": backoff.retry_at.isoformat() if backoff.retry_at else None,
        "reflection_paused": pause.view(backoff.pause, agent.name),
        "pending_requests": len(list(outbox.glob("*.json"))) if outbox.is_dir() else 0,
        **_uncommitted_memory(layout, agent),
        "held_proposals": _held(layout, agent),
        "approvals_waiting": len(waiting_calls(layout, agent.id)),
        **_memory_content(layout, agent, limits or MemoryLimits()),
        "last_idle_request": None
        if swept is None
        else {
            "conversation_id": swept[0],
            "request_id": swept[1].request_id,
            "requested_at": swept[1].at.isoformat(),
        },
    }


def _held(layout: Layout, agent: AgentRecord) -> list[dict[str, Any]]:
    """The reflections waiting for the user's answer (records only: no git)."""
    return [
        {
            "id": proposal.id,
            "created_at": proposal.created_at.isoformat(),
            "reason": proposal.destruction.reason,
            "why": proposal.destruction.describe(),
        }
        for proposal in held_proposals(layout.reflection_files(agent.id).proposals)
    ]


def _uncommitted_memory(layout: Layout, agent: AgentRecord) -> dict[str, Any]:
    """Files edited in the memory checkout and not committed, with what commits them; a
    repo git cannot read right now (damaged, busy) is left out, not an error of status."""
    try:
        files = MemoryRepo(layout.memory_dir(agent.id)).uncommitted()
    except AgentdError as exc:
        log.debug("status_memory_unread", agent_id=agent.id, error=exc.message)
        return {"uncommitted_memory": None}
    if not files:
        return {"uncommitted_memory": []}
    return {
        "uncommitted_memory": files,
        "uncommitted_notice": uncommitted_notice(agent.name, files),
    }


def _memory_content(layout: Layout, agent: AgentRecord, limits: MemoryLimits) -> dict[str, Any]:
    """What the memory checkout holds that memory may not (a nested repository, a file or
    memory over its size limit: a hand edit put it there), with what to do about it."""
    memory_dir = layout.memory_dir(agent.id)
    found = scan_checkout(memory_dir, limits) if memory_dir.is_dir() else []
    if not found:
        return {"memory_content": []}
    return {
        "memory_content": [
            {"rule": v.rule, "path": v.path, "size": v.size, "limit": v.limit} for v in found
        ],
        "memory_content_notice": notice(agent.name, memory_dir, found),
    }
