"""One reflection job in process, both sides of it: the daemon prepares it, a worker runs
it, the daemon settles the answer. The same functions the stack runs, with Redis only if a
client is given (without one, the inputs and the answer pass through a dict, as Redis
would hold them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from agentd.jobs.prepare import Desk, Prepared, prepare_or_fail
from agentd.jobs.record import record
from agentd.jobs.settle import read_answer, settle
from agentd.reflection.outbox import OutboxEntry
from reflector.gates import model_setup
from reflector.work import RedisTransfer, WorkerContext, run_work
from shared.coordination import jobs, transfer
from shared.errors import InvalidAnswer
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import Provider
from shared.reflection.job import JobAnswer, JobInput, JobMessage
from shared.settings import Settings
from shared.store.layout import Layout


@dataclass
class DictTransfer:
    """What Redis holds of jobs, in a dict: inputs by id, the first answer for each."""

    inputs: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)
    answers: dict[str, tuple[bytes, bytes | None]] = field(default_factory=dict)
    notices: list[JobAnswer] = field(default_factory=list)

    def put_input(self, job: JobInput, bundle: bytes) -> None:
        self.inputs[job.input_id] = (job.model_dump_json().encode(), bundle)

    def load(self, input_id: str) -> tuple[bytes, bytes] | None:
        return self.inputs.get(input_id)

    def store(self, answer: JobAnswer, bundle: bytes | None) -> bool:
        if answer.input_id in self.answers:
            return False
        self.answers[answer.input_id] = (answer.model_dump_json().encode(), bundle)
        return True

    def announce(self, answer: JobAnswer) -> None:
        self.notices.append(answer)

    def get_answer(self, input_id: str) -> tuple[bytes, bytes | None] | None:
        return self.answers.get(input_id)


class RedisHeld(RedisTransfer):
    """The production transfer, with the daemon's side of it for the harness."""

    def put_input(self, job: JobInput, bundle: bytes) -> None:
        transfer.put_input(self.client, job, bundle)

    def get_answer(self, input_id: str) -> tuple[bytes, bytes | None] | None:
        return transfer.get_answer(self.client, input_id)


@dataclass
class InProcess:
    """The two sides of a job, wired in one process."""

    settings: Settings
    provider: Provider
    """The sub-agent's model."""
    agent_provider: Provider
    """The agent's own model (its window; explicit merge mode's review)."""
    clock: Callable[[], Any]
    redis: redis.Redis | None = None
    transfer: DictTransfer | RedisHeld = field(init=False)

    def __post_init__(self) -> None:
        self.transfer = RedisHeld(self.redis) if self.redis is not None else DictTransfer()

    @property
    def desk(self) -> Desk:
        return Desk(
            self.settings,
            agent_provider_for=lambda _agent: self.agent_provider,
            reader_window=lambda _agent: self.provider.context_window,
            clock=self.clock,
        )

    def worker(self, **overrides: Any) -> WorkerContext:
        fields: dict[str, Any] = {
            "settings": self.settings,
            "redis": self.redis,
            "transfer": self.transfer,
            "provider_for": lambda _job: self.provider,
            # The window as configured: the harness's reflectors differ in theirs.
            "setup_of": lambda job: model_setup(
                self.settings, job.model, self.settings.reflection_context_window
            ),
            "worker": "test-worker@here",
            "clock": self.clock,
        }
        return WorkerContext(**{**fields, **overrides})

    def prepare(self, request: ReflectionRequest) -> Prepared | ReflectionOutcome:
        prepared = prepare_or_fail(self.desk, request)
        if isinstance(prepared, ReflectionOutcome):
            record(self.desk.layout, prepared, self.redis)
        else:
            self.transfer.put_input(prepared.job, prepared.bundle)
        return prepared

    def work(self, prepared: Prepared, **overrides: Any) -> JobAnswer | None:
        """A worker runs the job (as many times as it is called: redeliveries)."""
        message = JobMessage(
            job_id=prepared.job.job_id,
            input_id=prepared.ticket.input_id,
            agent_id=prepared.job.request.agent_id,
            input_bytes=prepared.ticket.bundle_bytes,
        )
        return run_work(message.model_dump(mode="json"), self.worker(**overrides))

    def settle(self, request: ReflectionRequest, prepared: Prepared) -> ReflectionOutcome | None:
        """The daemon settles the stored answer; None when there is none."""
        found = self.transfer.get_answer(prepared.ticket.input_id)
        if found is None:
            return None
        raw, bundle = found
        answer: JobAnswer | InvalidAnswer
        try:
            answer = read_answer(raw)
        except InvalidAnswer as exc:
            answer = exc
        outcome = asyncio.run(settle(self.desk, request, prepared.ticket, answer, bundle))
        record(self.desk.layout, outcome, self.redis, prepared.ticket.input_id)
        return outcome

    def reflect(self, request: ReflectionRequest) -> ReflectionOutcome | None:
        """The whole job; None for a copy of a job that runs elsewhere (it answers)."""
        prepared = self.prepare(request)
        if isinstance(prepared, ReflectionOutcome):
            return prepared
        answer = self.work(prepared)
        if answer is not None and answer.reason == "already_active":
            outcome = self.desk.outcome(request, "skipped", answer.reason, answer.message)
            record(self.desk.layout, outcome, None)
            return outcome
        if answer is None and self.redis is not None:
            finished = jobs.finished(self.redis, request.request_id)
            if finished is not None or jobs.answered(self.redis, request.request_id) is None:
                return finished
        return self.settle(request, prepared)


def work_sent_job(
    home: Path, agent_id: str, request_id: str, provider: Provider, client: redis.Redis
) -> JobAnswer | None:
    """Run, as a worker would, the job a running daemon sent for ``request_id`` (its
    message is in the queue; no worker process takes it)."""
    outbox = Layout(home).reflection_files(agent_id).outbox
    entry = OutboxEntry.model_validate_json((outbox / f"{request_id}.json").read_text())
    assert entry.ticket is not None, "the request was not sent"
    message = JobMessage(
        job_id=request_id,
        input_id=entry.ticket.input_id,
        agent_id=agent_id,
        input_bytes=entry.ticket.bundle_bytes,
    )
    settings = Settings(home=home)
    context = WorkerContext(
        settings=settings,
        redis=client,
        transfer=RedisTransfer(client),
        provider_for=lambda _job: provider,
        setup_of=lambda job: model_setup(settings, job.model, job.context_window),
    )
    return run_work(message.model_dump(mode="json"), context)
