"""Durable reflection requests: written to disk first, then sent; re-sent until answered.

A chat turn never waits for Redis: :meth:`Outbox.submit` writes the request under the
agent's ``reflections/outbox/`` and returns; sending happens in a thread. If the broker
is down the request stays on disk, and the reconcile loop sends it again when Redis is
back (or after a restart). An entry leaves the outbox when an outcome for it is known,
from the outcome stream or, if Redis lost that, from ``reflections/log.jsonl``.

Requests for the same slice collapse: a pending entry for the same (agent, conversation,
watermark) absorbs a new one, so a step-count trigger that fires on every turn while a
reflection is pending adds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from shared.coordination import keys
from shared.coordination.broker import RedisLocation
from shared.ids import new_id
from shared.models.reflection import ReflectionOutcome, ReflectionRequest, TriggerSource
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

RECONCILE_EVERY_S = 5.0
RESEND_AFTER_S = 15 * 60.0
"""A sent request with no outcome after this long is sent again (the job is idempotent)."""


class OutboxEntry(BaseModel):
    request: ReflectionRequest
    slice_key: str | None = None
    """(agent, conversation, watermark): a pending entry with the same key absorbs a new
    request. Each request still gets its own id — the job's identity in Redis — so a slice
    whose reflection failed is tried again by the next request instead of being a no-op."""
    sent_at: float | None = None
    attempts: int = 0


class Outbox:
    def __init__(self, layout: Layout, location: RedisLocation) -> None:
        self.layout = layout
        self.location = location
        self._app: Any = None
        self._warned_down = False

    def directory(self, agent_id: str) -> Path:
        return outbox_dir(self.layout, agent_id)

    def submit(
        self,
        agent_id: str,
        trigger: TriggerSource,
        conversation_ids: list[str],
        *,
        slice_key: str | None = None,
        recent: int | None = None,
        instruction: str | None = None,
    ) -> ReflectionRequest:
        """Record a request (or find the pending one for the same slice) and send it."""
        directory = self.directory(agent_id)
        directory.mkdir(parents=True, exist_ok=True)
        if slice_key is not None:
            for path in sorted(directory.glob("*.json")):
                existing = read_model(path, OutboxEntry)
                if existing is not None and existing.slice_key == slice_key:
                    log.info("reflection_request_collapsed", request_id=existing.request.request_id)
                    return existing.request
        request = ReflectionRequest(
            request_id=new_id("rq"),
            agent_id=agent_id,
            conversation_ids=conversation_ids,
            trigger=trigger,
            recent=recent,
            instruction=instruction,
        )
        entry = OutboxEntry(request=request, slice_key=slice_key)
        write_model_atomic(directory / f"{request.request_id}.json", entry)
        log.info("reflection_requested", request_id=request.request_id, trigger=trigger)
        return request

    async def send_now(self, request: ReflectionRequest) -> bool:
        """Send one freshly submitted request; False if Redis is not there (it stays due)."""
        path = self.directory(request.agent_id) / f"{request.request_id}.json"
        entry = read_model(path, OutboxEntry)
        if entry is None or entry.sent_at is not None:
            return entry is not None
        if not await asyncio.to_thread(self._send, entry.request):
            return False
        entry.sent_at, entry.attempts = time.time(), entry.attempts + 1
        if path.exists():
            write_model_atomic(path, entry)
        return True

    async def send_pending(self, agent_ids: list[str]) -> None:
        """Send every entry never sent, or sent long ago without an outcome."""
        for agent_id in agent_ids:
            for path in sorted(self.directory(agent_id).glob("*.json")):
                entry = read_model(path, OutboxEntry)
                if entry is None:
                    continue
                if entry.sent_at is not None and time.time() - entry.sent_at < RESEND_AFTER_S:
                    continue
                if not await asyncio.to_thread(self._send, entry.request):
                    return
                entry.sent_at, entry.attempts = time.time(), entry.attempts + 1
                with contextlib.suppress(FileNotFoundError):
                    if path.exists():
                        write_model_atomic(path, entry)

    def _reachable(self) -> bool:
        import redis

        client = redis.Redis.from_url(
            self.location.redis_url, socket_connect_timeout=0.5, socket_timeout=0.5
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _send(self, request: ReflectionRequest) -> bool:
        if not self._reachable():
            if not self._warned_down:
                log.warning(
                    "reflection_broker_unreachable",
                    redis=self.location.redis_url,
                    hint="requests stay on disk and are sent when Redis is back",
                )
                self._warned_down = True
            return False
        try:
            self._celery().send_task(
                keys.REFLECT_TASK,
                kwargs={"request": request.model_dump(mode="json")},
                queue=keys.REFLECTION_QUEUE,
                task_id=request.request_id,
                retry=False,
            )
        except Exception as exc:  # kombu raises OperationalError and friends when Redis is down
            if not self._warned_down:
                log.warning(
                    "reflection_broker_unreachable",
                    error=str(exc),
                    hint="requests stay on disk and are sent when Redis is back",
                )
                self._warned_down = True
            return False
        self._warned_down = False
        log.info("reflection_sent", request_id=request.request_id)
        return True

    def _celery(self) -> Any:
        if self._app is None:
            from celery import Celery

            self._app = Celery("agentd", broker=self.location.celery_url)
            self._app.conf.broker_connection_retry_on_startup = False
            self._app.conf.broker_connection_timeout = 2
        return self._app

    def resend_in(self, outcome: ReflectionOutcome, seconds: float) -> None:
        """Send a coalesced request again after ``seconds``: if the lease holder it waited
        for died, nobody else will run its follow-up before the lease expires."""
        path = self.directory(outcome.agent_id) / f"{outcome.request_id}.json"
        entry = read_model(path, OutboxEntry)
        if entry is not None:
            entry.sent_at = time.time() - RESEND_AFTER_S + seconds
            write_model_atomic(path, entry)

    def complete(self, outcome: ReflectionOutcome) -> None:
        path = self.directory(outcome.agent_id) / f"{outcome.request_id}.json"
        path.unlink(missing_ok=True)

    def settle_from_logs(self, agent_ids: list[str]) -> list[ReflectionOutcome]:
        """Outcomes already in ``log.jsonl`` for entries still in the outbox."""
        settled = []
        for agent_id in agent_ids:
            pending = {p.stem for p in self.directory(agent_id).glob("*.json")}
            if not pending:
                continue
            for outcome in read_outcomes(self.layout, agent_id, tail=500):
                if outcome.request_id in pending and answers_request(outcome):
                    self.complete(outcome)
                    pending.discard(outcome.request_id)
                    settled.append(outcome)
        return settled


def outbox_dir(layout: Layout, agent_id: str) -> Path:
    return layout.reflections_dir(agent_id) / "outbox"


def outcomes_log(layout: Layout, agent_id: str) -> Path:
    return layout.reflections_dir(agent_id) / "log.jsonl"


def read_outcomes(layout: Layout, agent_id: str, *, tail: int = 100) -> list[ReflectionOutcome]:
    path = outcomes_log(layout, agent_id)
    if not path.exists():
        return []
    outcomes = []
    for line in path.read_text().splitlines()[-tail:]:
        with contextlib.suppress(ValueError):
            outcomes.append(ReflectionOutcome.model_validate_json(line))
    return outcomes


def answers_request(outcome: ReflectionOutcome) -> bool:
    """Every outcome settles its request except ``already_active``: that request was
    coalesced into a follow-up run, whose own outcome will settle it."""
    return outcome.reason != "already_active"
