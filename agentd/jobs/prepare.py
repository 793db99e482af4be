"""A reflection job as the daemon sends it: gates, then everything the run will read.

When a request is sent, the daemon checks the gates that need the home, in order, each an
outcome with a reason and no job sent: ``memfs_disabled`` (no memory repo),
``retry_backoff`` (automatic runs only; manual runs bypass it), ``parent_dirty`` (memory
has uncommitted edits) and ``no_payload``. Then it takes the slice after each
conversation's watermark, up to a snapshot end recorded now (messages appended later stay
for the next job) and cut to the job's budget (:mod:`agentd.jobs.selection`), writes it as
the payload (kept on disk: the record of what a reflection was shown), measures the
agent's core-memory budget (:mod:`agentd.jobs.budget`) and bundles memory at its HEAD
(:func:`shared.memory.bundles.snapshot`). The :class:`~shared.reflection.job.JobInput`
carries all of it to a worker; the :class:`Ticket` stays in the outbox entry, so the
daemon judges the answer against what it sent, not against what the worker says it was
sent.

A bundle over ``AGENTD_REFLECTION_JOB_MAX_BYTES`` is not sent: the job fails
``job_too_large`` with the sizes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from pydantic import BaseModel

from agentd.jobs.budget import budget_for
from agentd.jobs.gates import current_pause, feed_failure, retry_backoff
from agentd.jobs.outcome_text import waiting_for_commit
from agentd.jobs.selection import requested_slices
from shared.clock import Clock, user_zone, utc_now
from shared.errors import AgentdError, JobTooLarge
from shared.memory import bundles
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import Provider
from shared.reflection.failures import failure_reason
from shared.reflection.job import JobInput, MemoryBudget, reflection_id_for
from shared.reflection.payload import Limits, PayloadFile, write_payload
from shared.reflection.state import mark_started
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

SUBAGENT_MAX_STEPS = 12


class Ticket(BaseModel):
    """What the daemon sent for a job, kept with its outbox entry until the job settles."""

    input_id: str
    reflection_id: str
    base_head: str
    payload: PayloadFile
    budget: MemoryBudget
    bundle_bytes: int
    prepared_at: datetime


@dataclass(frozen=True)
class Prepared:
    ticket: Ticket
    job: JobInput
    bundle: bytes


@dataclass
class Desk:
    """What the daemon's side of a job needs: its settings and clock, and the models of
    the agent (its window sets the memory budget; in explicit merge mode it reviews the
    proposal) and of the reflector (its window sets how much of the payload one job
    shows)."""

    settings: Settings
    agent_provider_for: Callable[[AgentRecord], Provider]
    reader_window: Callable[[AgentRecord], int]
    clock: Clock = utc_now
    layout: Layout = field(init=False)
    timezone_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.layout = Layout(self.settings.home)
        self.timezone_name = user_zone(self.settings.timezone)[1]

    def reflection_model(self, agent: AgentRecord) -> str:
        return self.settings.reflection_model or agent.model or self.settings.model

    def outcome(
        self,
        request: ReflectionRequest,
        status: str,
        reason: str | None = None,
        message: str = "",
        *,
        started: datetime | None = None,
        commits: list[str] | None = None,
        unread: list[str] | None = None,
    ) -> ReflectionOutcome:
        now = self.clock()
        return ReflectionOutcome(
            reflection_id=reflection_id_for(request),
            request_id=request.request_id,
            agent_id=request.agent_id,
            conversation_ids=request.conversation_ids,
            trigger=request.trigger,
            # callers pass a worker's answer status or a run's, wider Literals than an
            # outcome's; ReflectionOutcome validates the value it is given
            status=status,  # type: ignore[arg-type]
            reason=reason,
            message=message,
            commits=commits or [],
            unread=unread or [],
            started_at=started or now,
            finished_at=now,
        )


def prepare_or_fail(desk: Desk, request: ReflectionRequest) -> Prepared | ReflectionOutcome:
    """:func:`prepare`, or ``failed`` with the reason of what went wrong (a damaged agent
    record, a git or disk failure, memory too large to send)."""
    try:
        return prepare(desk, request)
    except Exception as exc:
        reason = failure_reason(exc)
        if isinstance(exc, AgentdError):
            detail = exc.message
            log.warning("reflection_not_prepared", reason=reason, error=detail)
        else:
            detail = f"{type(exc).__name__}: {exc}"
            log.exception("reflection_prepare_crashed", reason=reason)
        reflections_dir = desk.layout.reflections_dir(request.agent_id)
        if reflections_dir.parent.is_dir():
            feed_failure(reflections_dir, reason, now=desk.clock())
        return desk.outcome(request, "failed", reason, f"{detail}; the transcript can be retried.")


def prepare(desk: Desk, request: ReflectionRequest) -> Prepared | ReflectionOutcome:
    """The job to send for ``request``, or the outcome of a gate that closed."""
    layout = desk.layout
    memory_dir = layout.memory_dir(request.agent_id)
    if not (memory_dir / ".git").is_dir():
        return desk.outcome(request, "skipped", "memfs_disabled", "The agent has no memory repo.")
    agent = AgentStore(layout).get(request.agent_id)
    files = layout.reflection_files(request.agent_id)
    manual = request.trigger == "manual"
    if not manual and (closed := retry_backoff(files.directory, now=desk.clock())):
        return desk.outcome(request, "skipped", *closed)
    with MemoryRepo(memory_dir) as repo:
        uncommitted = repo.uncommitted()
        base_head = repo.head()
    if uncommitted:
        message = waiting_for_commit(agent.name, uncommitted, memory_dir)
        return desk.outcome(request, "skipped", "parent_dirty", message)
    slices = requested_slices(layout, request)
    if not slices:
        return desk.outcome(request, "skipped", "no_payload", "Nothing new to reflect on.")
    bundle = bundles.snapshot(memory_dir, base_head)
    limit = desk.settings.reflection_job_max_bytes
    if len(bundle) > limit:
        raise JobTooLarge(
            f"memory's bundle is {len(bundle):,} bytes, over the {limit:,} a reflection job "
            "may carry (AGENTD_REFLECTION_JOB_MAX_BYTES); raise it, or make memory smaller"
        )
    payload = write_payload(
        files.payloads,
        request.agent_id,
        slices,
        limits=Limits.for_reader(
            context_window=desk.reader_window(agent),
            output_chars=desk.settings.bash_output_chars,
        ),
        instruction=request.instruction,
        clock=desk.clock,
    )
    for shown in payload.slices:
        mark_started(
            layout.conversation_dir(request.agent_id, shown.slice.conversation_id), desk.clock()
        )
    window = desk.agent_provider_for(agent).context_window
    reader_window = desk.reader_window(agent)
    ticket = Ticket(
        input_id=f"{request.request_id}-{secrets.token_hex(4)}",
        reflection_id=reflection_id_for(request),
        base_head=base_head,
        payload=payload,
        budget=budget_for(agent, window, memory_dir, base_head),
        bundle_bytes=len(bundle),
        prepared_at=desk.clock(),
    )
    job = JobInput(
        job_id=request.request_id,
        input_id=ticket.input_id,
        reflection_id=ticket.reflection_id,
        request=request,
        agent_name=agent.name,
        base_head=base_head,
        model=desk.reflection_model(agent),
        context_window=reader_window,
        memory_budget=ticket.budget,
        payload=payload,
        files={path.name: path.read_text(encoding="utf-8") for path in payload.files},
        output_chars=desk.settings.bash_output_chars,
        max_steps=SUBAGENT_MAX_STEPS,
        timezone=desk.timezone_name,
        pause=None if manual else current_pause(files.directory),
    )
    log.info(
        "reflection_prepared",
        request_id=request.request_id,
        base_head=base_head,
        bundle_bytes=len(bundle),
    )
    return Prepared(ticket, job, bundle)
