"""One reflection job: gates → payload → worktree → sub-agent → finalize → outcome.

Gates, in order, each an outcome with a reason: ``memfs_disabled``; ``retry_backoff``
and ``configuration_error`` (automatic runs only; manual runs bypass them:
:mod:`reflector.gates`); ``already_active`` (another job holds the agent's lease; a
copy of *this* job — a redelivery — records nothing, since the running one's outcome
settles the request); ``parent_dirty`` (checked before any payload or worktree exists);
``no_payload``. Then the slice after each conversation's watermark, up to a snapshot end
recorded now (messages appended while the job runs stay unreflected) and cut to the job's
budget, becomes a payload (:mod:`reflector.selection`); the sub-agent works in a fresh
worktree; a destructive result is held for the user (:mod:`reflector.hold`); finalize
merges only a run that earned success; the watermark moves only for ``merged``,
``no_changes`` and ``held``, and only as far as the sub-agent read.

Every job but a redelivered copy of a running one ends with a recorded outcome, whatever
goes wrong: :func:`run_job` is the
boundary, and an exception there becomes ``failed`` with its reason (a Redis error, a
time limit, a git or disk failure). A job redelivered more than
``AGENTD_REFLECTION_MAX_TRIES`` times — one that keeps killing its worker — is recorded
``failed: redelivered`` and not run again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path

import redis
import structlog

from reflector.checkout import Worktree, collect, create_worktree, sweep_orphans
from reflector.finalize import FinalizeResult, finalize
from reflector.gates import automatic_gate, feed_backoff, model_setup
from reflector.hold import held_message, hold_if_destructive, settle_held
from reflector.integration import has_proposal, integrate
from reflector.landing import reflection_trailers
from reflector.memory_budget import MemoryBudget, budget_for, floor_at, over_budget
from reflector.outcome_text import explain, failure_reason, over_budget_message, waiting_for_commit
from reflector.outcomes import publish_outcome
from reflector.selection import requested_slices
from reflector.snapshot import parent_snapshot
from reflector.subagent import SubagentRun, run_reflection_subagent
from shared import sandbox
from shared.clock import Clock, utc_now
from shared.coordination import jobs, keys
from shared.coordination.lease import ReflectionLease, live_reflection_ids
from shared.errors import AgentdError, MemoryContentError, ReflectionError, TooManyCommits
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import Provider
from shared.reflection import backoff, events
from shared.reflection.payload import Limits, PayloadFile, write_payload
from shared.reflection.settings import configured_defaults, resolve
from shared.reflection.state import advance, mark_started
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

SUBAGENT_MAX_STEPS = 12
LEASE_WAIT_S = 3.0
"""How long a job waits for its agent's lease before it counts as ``already_active``: a
worker's start-up sweep holds it for milliseconds, and a job redelivered just then must
run, not skip."""


class LeaseLost(ReflectionError):
    code = "lease_lost"


@dataclass
class JobContext:
    settings: Settings
    redis: redis.Redis | None
    provider_for: Callable[[AgentRecord], Provider]
    """The sub-agent's model for an agent (the mock reflector for ``mock``)."""
    agent_provider_for: Callable[[AgentRecord], Provider]
    """The agent's own model: its window sets the memory budget, and in explicit merge
    mode it reviews and merges the proposal."""
    clock: Clock = utc_now
    local_zone: tzinfo | None = None
    timezone_name: str = "UTC"
    setup_of: Callable[[AgentRecord], str] | None = None
    """The digest of the sub-agent's model setup for an agent (a pause lifts when it
    changes); by default from the settings alone."""
    layout: Layout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = Layout(self.settings.home)

    def setup(self, agent: AgentRecord) -> str:
        return self.setup_of(agent) if self.setup_of else model_setup(self.settings, agent)


def reflection_id_for(request: ReflectionRequest) -> str:
    """Stable per request: a redelivered job reuses its id (and its worktree name)."""
    digest = hashlib.sha256(request.request_id.encode()).hexdigest()[:8]
    return f"{request.requested_at:%Y%m%d%H%M%S}-{digest}"


def run_job(request: ReflectionRequest, job_id: str, ctx: JobContext) -> ReflectionOutcome | None:
    """Run one job to a recorded outcome; a job that already finished is a no-op, and so
    is a copy of a job that is running (None, or the outcome it just recorded)."""
    done = _finished(ctx.redis, job_id)
    if done is not None:
        log.info("reflection_already_finished", job_id=job_id, status=done.status)
        return done
    job = _Job(request, job_id, ctx)
    with structlog.contextvars.bound_contextvars(reflection_id=job.reflection_id):
        try:
            outcome = job.run()
        except Exception as exc:
            outcome = job.crashed(exc)
        if outcome is None:
            job.release_lease()
            log.info("reflection_copy_not_run", job_id=job_id, hint="its running copy reports")
            return _finished(ctx.redis, job_id)
        try:
            events.append(job.reflections_dir, outcome)
            publish_outcome(ctx.redis, job_id, outcome)
        finally:
            job.release_lease()  # only now: a running job without a lease looks lost
        log.info(
            "reflection_finished",
            status=outcome.status,
            reason=outcome.reason,
            seconds=round(outcome.duration_s, 2),
        )
        return outcome


def _finished(client: redis.Redis | None, job_id: str) -> ReflectionOutcome | None:
    if client is None:
        return None
    try:
        return jobs.finished(client, job_id)
    except redis.RedisError:
        return None


class _Job:
    def __init__(self, request: ReflectionRequest, job_id: str, ctx: JobContext) -> None:
        self.request = request
        self.job_id = job_id
        self.ctx = ctx
        self.reflection_id = reflection_id_for(request)
        self.started = ctx.clock()
        self.layout = ctx.layout
        self.files = self.layout.reflection_files(request.agent_id)
        self.reflections_dir = self.files.directory
        self.manual = request.trigger == "manual"
        self.lease: ReflectionLease | None = None
        self.setup = ""
        """The digest of the sub-agent's model setup, once the agent is read."""

    def outcome(
        self,
        status: str,
        reason: str | None = None,
        message: str = "",
        commits: list[str] | None = None,
        unread: list[str] | None = None,
    ) -> ReflectionOutcome:
        return ReflectionOutcome(
            reflection_id=self.reflection_id,
            request_id=self.request.request_id,
            agent_id=self.request.agent_id,
            conversation_ids=self.request.conversation_ids,
            trigger=self.request.trigger,
            status=status,  # type: ignore[arg-type]
            reason=reason,
            message=message,
            commits=commits or [],
            unread=unread or [],
            started_at=self.started,
            finished_at=self.ctx.clock(),
        )

    def skipped(self, reason: str, message: str) -> ReflectionOutcome:
        return self.outcome("skipped", reason, message)

    def crashed(self, exc: Exception) -> ReflectionOutcome:
        reason = failure_reason(exc)
        detail = exc.message if isinstance(exc, AgentdError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AgentdError):
            log.warning("reflection_error", reason=reason, error=detail)
        else:
            log.exception("reflection_crashed", reason=reason)
        if isinstance(exc, MemoryContentError | TooManyCommits):
            # What the reflector made was refused; the same transcript may talk it into the
            # same again, so the next automatic run waits like any other failed one.
            backoff.record_result(
                self.reflections_dir,
                consumed=False,
                backs_off=True,
                pause=None,
                now=self.ctx.clock(),
            )
        return self.outcome("failed", reason, f"{detail}; the transcript can be retried.")

    def run(self) -> ReflectionOutcome | None:
        """The job's outcome; None for a copy of this job that found it running or done."""
        memory_dir = self.layout.memory_dir(self.request.agent_id)
        if not (memory_dir / ".git").is_dir():
            return self.skipped("memfs_disabled", "The agent has no memory repo.")
        agent = AgentStore(self.layout).get(self.request.agent_id)
        if not (sandbox.available() or self.ctx.settings.unsandboxed_bash):
            return self.outcome(
                "failed",
                "sandbox_unavailable",
                f"The reflection's shell runs only in bubblewrap, and {sandbox.reason()}. "
                "Install bubblewrap (`apt-get install bubblewrap`), or set "
                "AGENTD_UNSANDBOXED_BASH=1 to let it run unconfined; the transcript can be "
                "retried.",
            )
        self.setup = self.ctx.setup(agent)
        if not self.manual:
            closed = automatic_gate(
                self.reflections_dir, now=self.ctx.clock(), setup=self.setup, agent=agent
            )
            if closed is not None:
                return self.skipped(*closed)
        lease = self._lease()
        if lease is not None:
            if not lease.acquire(wait_s=LEASE_WAIT_S):
                if lease.holder() == self.job_id or self._done():
                    return None
                return self.skipped("already_active", "Another reflection is running; queued.")
            self.lease = lease
            if self._done():
                return None
        if self.ctx.redis is not None:
            jobs.mark(self.ctx.redis, self.job_id, "running")
            tries = jobs.count_try(self.ctx.redis, self.job_id)
            if tries > self.ctx.settings.reflection_max_tries:
                return self.outcome(
                    "failed",
                    "redelivered",
                    f"This job was started {tries} times without finishing (its worker "
                    "died each time); it is not run again. See the worker logs; "
                    "`agentctl reflect` asks for a new one.",
                )
        return self._reflect(agent, memory_dir)

    def _done(self) -> bool:
        """Another copy of this job finished it (checked with the lease, or without it)."""
        return _finished(self.ctx.redis, self.job_id) is not None

    def release_lease(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def _lease(self) -> ReflectionLease | None:
        if self.ctx.redis is None:
            return None
        return ReflectionLease(
            self.ctx.redis,
            self.request.agent_id,
            owner=self.job_id,
            ttl_s=self.ctx.settings.reflection_lease_s,
            alive_key=keys.live_reflection(self.request.agent_id, self.reflection_id),
        )

    def _live_reflections(self) -> set[str]:
        """Our own worktree and those of jobs still renewing a lease (one that lost the
        agent's lease to us may still be working in its worktree)."""
        if self.ctx.redis is None:
            return {self.reflection_id}
        return {self.reflection_id} | live_reflection_ids(self.ctx.redis, self.request.agent_id)

    def _reflect(self, agent: AgentRecord, memory_dir: Path) -> ReflectionOutcome:
        worktrees_dir = self.files.worktrees
        sweep_orphans(memory_dir, worktrees_dir, self._live_reflections())
        with MemoryRepo(memory_dir) as repo:
            uncommitted = repo.uncommitted()
        if uncommitted:
            return self.skipped(
                "parent_dirty", waiting_for_commit(agent.name, uncommitted, memory_dir)
            )
        provider = self.ctx.provider_for(agent)
        limits = Limits.for_reader(
            context_window=provider.context_window,
            output_chars=self.ctx.settings.bash_output_chars,
        )
        slices = requested_slices(self.layout, self.request)
        if not slices:
            return self.skipped("no_payload", "Nothing new to reflect on.")
        payload = write_payload(
            self.files.payloads,
            self.request.agent_id,
            slices,
            limits=limits,
            instruction=self.request.instruction,
            clock=self.ctx.clock,
        )
        for shown in payload.slices:
            mark_started(self._conversation_dir(shown.slice.conversation_id), self.ctx.clock())
        worktree = create_worktree(
            memory_dir,
            worktrees_dir,
            self.reflection_id,
            author_email=f"{self.request.agent_id}~reflection@agentd.local",
            trailers=reflection_trailers(self.request.agent_id, self.reflection_id, payload),
            limits=self.ctx.settings.memory_limits,
        )
        try:
            window = self.ctx.agent_provider_for(agent).context_window
            budget = budget_for(agent, window, memory_dir, worktree.base_head)
            run = self._run_subagent(agent, provider, worktree, payload, budget)
            if run.success and collect(worktree):
                floor_after = floor_at(agent, memory_dir, worktree.branch)
                if over_budget(budget, floor_after):
                    finalize(worktree, should_merge=False, failure_summary="memory over budget")
                    return self._over_budget(budget, floor_after)
                held = hold_if_destructive(worktree, self.request, self.reflection_id, self.ctx)
                if held is not None:
                    finalize(worktree, should_merge=False, failure_summary="held for the user")
                    settle_held(
                        run.consumed, self.reflections_dir, self._conversation_dir, self.ctx.clock
                    )
                    return self.outcome(
                        "held",
                        held.destruction.reason,
                        held_message(held, agent.name),
                        unread=run.unread,
                    )
            result = self._finalize(agent, worktree, run, memory_dir)
        except BaseException:
            finalize(worktree, should_merge=False)
            raise
        return self._conclude(run, result, memory_dir, worktree.base_head)

    def _over_budget(self, budget: MemoryBudget, floor_after: int) -> ReflectionOutcome:
        backoff.record_result(
            self.reflections_dir, consumed=False, backs_off=True, pause=None, now=self.ctx.clock()
        )
        return self.outcome(
            "failed", "memory_over_budget", over_budget_message(budget, floor_after)
        )

    def _finalize(
        self, agent: AgentRecord, worktree: Worktree, run: SubagentRun, memory_dir: Path
    ) -> FinalizeResult:
        """Merge by the harness, or (explicit mode) let the agent decide and ask git.

        Only while this job still holds the agent's lease: a job whose lease expired (its
        renewals stalled, or Redis went away) may no longer be the only reflection of the
        agent."""
        if self.lease is not None and not self.lease.still_held():
            raise LeaseLost(
                "the reflection lease was lost during the job (renewals failed or it "
                "expired), so another job may own the agent now; nothing was merged"
            )
        mode = resolve(configured_defaults(self.ctx.settings), agent.reflection)
        if not (run.success and mode.merge == "explicit" and has_proposal(worktree)):
            return finalize(
                worktree,
                should_merge=run.success,
                failure_summary=None if run.success else run.reason,
            )
        return integrate(
            provider=self.ctx.agent_provider_for(agent),
            agent=agent,
            memory_dir=memory_dir,
            worktree=worktree,
            reflection_id=self.reflection_id,
            instructions=mode.merge_instructions,
            conversation_dir=self.files.integrations,
            clock=self.ctx.clock,
            unsandboxed_bash=self.ctx.settings.unsandboxed_bash,
        )

    def _run_subagent(
        self,
        agent: AgentRecord,
        provider: Provider,
        worktree: Worktree,
        payload: PayloadFile,
        budget: MemoryBudget,
    ) -> SubagentRun:
        now = self.ctx.clock().astimezone(self.ctx.local_zone)
        return asyncio.run(
            run_reflection_subagent(
                provider=provider,
                worktree=worktree,
                payload=payload,
                parent_agent_id=agent.id,
                job_id=self.reflection_id,
                parent_snapshot=parent_snapshot(worktree.path),
                instruction=self.request.instruction,
                conversation_dir=self.files.subagents,
                now=now,
                timezone_name=self.ctx.timezone_name,
                max_steps=SUBAGENT_MAX_STEPS,
                output_chars=self.ctx.settings.bash_output_chars,
                unsandboxed_bash=self.ctx.settings.unsandboxed_bash,
                memory_budget=budget,
                clock=self.ctx.clock,
            )
        )

    def _conclude(
        self, run: SubagentRun, result: FinalizeResult, memory_dir: Path, base_head: str
    ) -> ReflectionOutcome:
        feed_backoff(self.reflections_dir, run, result, setup=self.setup, now=self.ctx.clock())
        if result.consumed:
            for slice in run.consumed:
                directory = self._conversation_dir(slice.conversation_id)
                advance(directory, slice, clock=self.ctx.clock)
            commits = _commits(memory_dir, base_head) if result.status == "merged" else []
            message = result.message
            if run.unread:
                message += " Some messages were not read yet; the next reflection takes them."
            return self.outcome(result.status, None, message, commits, run.unread)
        if result.reason is not None:  # what the harness found outranks how the run went
            detail = f"{result.message}; nothing was merged, the transcript can be retried."
            return self.outcome("failed", result.reason, detail)
        if not run.success:
            reason: str = run.reason
        elif result.status == "failed":
            reason = "integration"  # explicit mode: the agent did not merge the proposal
        else:
            reason = result.status
        if run.error_message:
            return self.outcome(
                "failed",
                run.error_code or reason,
                f"{run.error_message}; the transcript can be retried.",
            )
        return self.outcome(
            "failed",
            reason,
            f"{explain(reason, result, self.request.agent_id)}; the transcript can be retried.",
        )

    def _conversation_dir(self, conversation_id: str) -> Path:
        return self.layout.conversation_dir(self.request.agent_id, conversation_id)


def _commits(memory_dir: Path, base_head: str) -> list[str]:
    """Short shas of what the merge brought onto main since the job started, newest first."""
    merged = []
    with MemoryRepo(memory_dir) as repo:
        for commit in repo.log(50):
            if commit.sha == base_head:
                break
            merged.append(commit.short_sha)
    return merged
