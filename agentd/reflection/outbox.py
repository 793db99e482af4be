"""Durable reflection requests: on disk first, then sent; one running and one pending per agent.

A chat turn never waits for Redis: :meth:`Outbox.submit` records a request under the
agent's ``reflections/outbox/`` and returns; sending happens in a thread. An agent has at
most one request *sent* (queued or running in a worker) and at most one *pending* (due,
waiting for the sent one to end). A request made while one is pending joins it — its
conversations are added, a manual request makes it manual — so a trigger that fires while
a reflection runs is never swallowed: it becomes the run that starts when the running one
ends, and covers everything after that one's snapshot. Nothing is ever sent twice on
purpose: a request that joined another has no job of its own.

Sending a request builds its job (:mod:`agentd.jobs.prepare`): the gates that need the
home, the payload, memory as a bundle; the inputs go to Redis and the entry keeps the
job's :class:`~agentd.jobs.prepare.Ticket`, what the daemon checks the answer against. A
gate that closes settles the request at once, with no job. The entry leaves the outbox
when its outcome is known: once the daemon has settled the worker's answer
(:mod:`agentd.jobs.settle`), from Redis's record of the finished job, or from
``reflections/log.jsonl``. If Redis lost the job (a restart without persistence, a crash
of everything), the entry is sent again at once, with its inputs built again if they went
too; the job is idempotent. A damaged entry is moved aside as ``*.corrupt`` and logged:
it never stops the requests of other agents or entries.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel

from agentd.daemon.effective_config import redact_url
from agentd.jobs.prepare import Desk, Ticket, prepare_or_fail
from shared.coordination import jobs, redis_keys, transfer
from shared.coordination.broker import RedisLocation
from shared.errors import CorruptStateFile
from shared.ids import new_id
from shared.models.reflection import ReflectionOutcome, ReflectionRequest, TriggerSource
from shared.reflection import events
from shared.reflection.job import JobMessage
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

EntryState = Literal["pending", "sent"]
TRIGGER_STRENGTH: dict[TriggerSource, int] = {
    "step-count": 0,
    "idle": 1,
    "compaction-event": 2,
    "manual": 3,
}
"""When requests join, the strongest trigger wins: a manual one bypasses backoff, a
compaction is not re-checked before it is sent; an idle one is re-checked for unreflected
steps (which a due step count has too), a step count for reaching its count."""


class OutboxEntry(BaseModel):
    request: ReflectionRequest
    state: EntryState = "pending"
    sent_at: float | None = None
    attempts: int = 0
    ticket: Ticket | None = None
    """What was sent for the job (its inputs' id, the memory commit, the payload)."""


def _joined(pending: ReflectionRequest, new: ReflectionRequest) -> ReflectionRequest:
    """``pending`` grown to cover ``new`` as well; it keeps its id (its waiters' id)."""
    strongest = max((pending.trigger, new.trigger), key=TRIGGER_STRENGTH.__getitem__)
    instructions = [i for i in (pending.instruction, new.instruction) if i]
    recent = max(pending.recent or 0, new.recent or 0) or None
    return pending.model_copy(
        update={
            "trigger": strongest,
            "conversation_ids": list(
                dict.fromkeys([*pending.conversation_ids, *new.conversation_ids])
            ),
            "recent": recent,
            "instruction": "\n\n".join(dict.fromkeys(instructions)) or None,
        }
    )


class Outbox:
    """The agents' outbox directories; used from the daemon's event loop only."""

    def __init__(self, layout: Layout, location: RedisLocation, desk: Desk) -> None:
        self.layout = layout
        self.location = location
        self.desk = desk
        self._app: Any = None
        self.broker_down = False
        """The last send found Redis unreachable (told once in the log until it is back)."""

    def directory(self, agent_id: str) -> Path:
        return outbox_dir(self.layout, agent_id)

    # --- entries ----------------------------------------------------------------------------

    def entries(self, agent_id: str) -> list[OutboxEntry]:
        """The agent's readable entries; a damaged one is moved aside and logged."""
        found = []
        for path in sorted(self.directory(agent_id).glob("*.json")):
            try:
                entry = read_model(path, OutboxEntry)
            except CorruptStateFile as exc:
                aside = path.with_suffix(".corrupt")
                with contextlib.suppress(OSError):
                    path.replace(aside)
                log.error(
                    "outbox_entry_corrupt",
                    path=str(path),
                    moved_to=str(aside),
                    error=exc.message,
                    hint="the request it held is dropped; `agentctl reflect` asks again",
                )
                continue
            if entry is not None:
                found.append(entry)
        return found

    def sent(self, agent_id: str) -> OutboxEntry | None:
        return next((e for e in self.entries(agent_id) if e.state == "sent"), None)

    def pending(self, agent_id: str) -> OutboxEntry | None:
        return next((e for e in self.entries(agent_id) if e.state == "pending"), None)

    def _path(self, request: ReflectionRequest) -> Path:
        return self.directory(request.agent_id) / f"{request.request_id}.json"

    def save(self, entry: OutboxEntry) -> None:
        write_model_atomic(self._path(entry.request), entry)

    def remove(self, request_id: str, agent_id: str) -> bool:
        path = self.directory(agent_id) / f"{request_id}.json"
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def submit(
        self,
        agent_id: str,
        trigger: TriggerSource,
        conversation_ids: list[str],
        *,
        recent: int | None = None,
        instruction: str | None = None,
    ) -> ReflectionRequest:
        """Record a request, or join it to the agent's pending one; return what will run."""
        self.directory(agent_id).mkdir(parents=True, exist_ok=True)
        request = ReflectionRequest(
            request_id=new_id("rq"),
            agent_id=agent_id,
            conversation_ids=conversation_ids,
            trigger=trigger,
            recent=recent,
            instruction=instruction,
        )
        pending = self.pending(agent_id)
        if pending is not None:
            pending.request = _joined(pending.request, request)
            self.save(pending)
            log.info(
                "reflection_request_joined",
                request_id=pending.request.request_id,
                trigger=trigger,
            )
            return pending.request
        self.save(OutboxEntry(request=request))
        log.info("reflection_requested", request_id=request.request_id, trigger=trigger)
        return request

    # --- talking to Redis (in a thread) -------------------------------------------------

    def send(self, entry: OutboxEntry) -> bool | ReflectionOutcome:
        """Build the entry's job (unless Redis still holds its inputs), hand it to Celery
        and record the entry as sent: True; False if Redis is away; the outcome when a
        gate settled the request without a job."""
        request = entry.request
        client = self._client()
        try:
            client.ping()
            ticket = entry.ticket
            if ticket is None or not transfer.has_input(client, ticket.input_id):
                prepared = prepare_or_fail(self.desk, request)
                if isinstance(prepared, ReflectionOutcome):
                    return prepared
                transfer.put_input(client, prepared.job, prepared.bundle)
                entry.ticket = ticket = prepared.ticket
            message = JobMessage(
                job_id=request.request_id,
                input_id=ticket.input_id,
                agent_id=request.agent_id,
                input_bytes=ticket.bundle_bytes,
            )
            jobs.mark(client, request.request_id, "queued")
            self._celery().send_task(
                redis_keys.REFLECT_TASK,
                kwargs={"job": message.model_dump(mode="json")},
                queue=redis_keys.REFLECTION_QUEUE,
                task_id=request.request_id,
                retry=False,
            )
        except Exception as exc:  # redis-py and kombu raise their own families when down
            if not self.broker_down:
                log.warning(
                    "reflection_broker_unreachable",
                    redis=redact_url(self.location.redis_url),
                    error=str(exc),
                    hint="requests stay on disk and are sent when Redis is back",
                )
                self.broker_down = True
            return False
        finally:
            client.close()
        self.broker_down = False
        entry.state, entry.sent_at = "sent", time.time()
        entry.attempts += 1
        self.save(entry)
        log.info("reflection_sent", request_id=request.request_id, attempt=entry.attempts)
        return True

    def answer(self, entry: OutboxEntry) -> tuple[bytes, bytes | None] | None:
        """The stored answer to the entry's job (its JSON and bundle); None when there is
        none, or Redis cannot be asked."""
        import redis

        if entry.ticket is None:
            return None
        client = self._client()
        try:
            return transfer.get_answer(client, entry.ticket.input_id)
        except redis.RedisError:
            return None
        finally:
            client.close()

    def answer_gone(self, entry: OutboxEntry) -> None:
        """Redis says the entry's job is answered and holds no answer for its inputs.

        Answered for these inputs, the answer was lost (evicted, expired): the inputs and
        the job's state go, so the reconcile loop finds the job unknown and sends it again,
        built anew (a worker would take the old inputs for answered). Answered for other
        inputs, a copy of the job that ran on inputs sent before said so: the job is
        queued again, as it is for its current inputs."""
        import redis

        if entry.ticket is None:
            return
        client = self._client()
        try:
            if jobs.answered(client, entry.request.request_id) != entry.ticket.input_id:
                jobs.mark(client, entry.request.request_id, "queued")
                return
            transfer.drop(client, entry.ticket.input_id)
            client.delete(redis_keys.job_state(entry.request.request_id))
        except redis.RedisError:
            return
        finally:
            client.close()
        entry.ticket = None
        self.save(entry)

    def client(self) -> Any:
        """A Redis client for one short use (the caller closes it)."""
        return self._client()

    def job_status(self, request: ReflectionRequest) -> jobs.Known | ReflectionOutcome | None:
        """What Redis knows of the request's job; None when Redis cannot be asked."""
        import redis

        client = self._client()
        grace_s = self.desk.settings.reflection_lease_s
        try:
            return jobs.status(client, request.request_id, request.agent_id, grace_s)
        except redis.RedisError:
            return None
        finally:
            client.close()

    def _client(self) -> Any:
        return self.location.client()

    def _celery(self) -> Any:
        if self._app is None:
            from celery import Celery

            self._app = Celery("agentd", broker=self.location.celery_url)
            self._app.conf.broker_use_ssl = self.location.celery_ssl
            self._app.conf.broker_connection_retry_on_startup = False
            self._app.conf.broker_connection_timeout = self.location.timeout_s
        return self._app

    # --- outcomes from disk ---------------------------------------------------------------

    def logged_outcome(self, request: ReflectionRequest) -> ReflectionOutcome | None:
        """The outcome ``log.jsonl`` holds for ``request``, if its job finished."""
        answers = [
            outcome
            for outcome in events.read(self.layout.reflections_dir(request.agent_id), tail=500)
            if outcome.request_id == request.request_id and events.answers_request(outcome)
        ]
        return answers[-1] if answers else None


def outbox_dir(layout: Layout, agent_id: str) -> Path:
    return layout.reflection_files(agent_id).outbox
