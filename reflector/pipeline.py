"""One reflection job: gates → payload → worktree → sub-agent → finalize → outcome.

Gates, in order, each an outcome with a reason: ``memfs_disabled``; ``retry_backoff``
and ``configuration_error`` (automatic runs only; manual runs bypass them);
``already_active`` (another job holds the agent's lease: this request is kept as the one
follow-up run for when it finishes); ``parent_dirty`` (checked before any payload or
worktree exists); ``no_payload``. Then the slice after each conversation's watermark, up
to a snapshot end recorded now (messages appended while the job runs stay unreflected),
becomes a payload file; the sub-agent works in a fresh worktree; finalize merges only a
run that earned success; the watermark moves only for ``merged`` and ``no_changes``.
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

from reflector.integration import has_proposal, run_integration
from reflector.outcomes import append_outcome, finished_outcome, publish_outcome
from reflector.snapshot import parent_snapshot
from reflector.subagent import SubagentRun, run_reflection_subagent
from reflector.worktree import (
    FinalizeResult,
    Worktree,
    create_worktree,
    finalize,
    sweep_orphans,
)
from shared.clock import Clock, utc_now
from shared.coordination import keys
from shared.coordination.lease import ReflectionLease
from shared.errors import AgentdError, ReflectionError
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import Provider
from shared.reflection import backoff
from shared.reflection.payload import (
    PayloadFile,
    Slice,
    replay_slice,
    select_slice,
    slice_records,
    write_payload,
)
from shared.reflection.settings import configured_defaults, resolve
from shared.reflection.state import advance, load_state, mark_started
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

SUBAGENT_MAX_STEPS = 12
CONFIGURATION_ERRORS = frozenset({"provider_config", "provider_auth", "prompt_floor"})


@dataclass
class JobContext:
    settings: Settings
    redis: redis.Redis | None
    provider_for: Callable[[AgentRecord], Provider]
    """The sub-agent's model for an agent (the mock reflector for ``mock``)."""
    send_follow_up: Callable[[ReflectionRequest], None]
    agent_provider_for: Callable[[AgentRecord], Provider] | None = None
    """The agent's own model, for explicit-merge integration (None: explicit mode is
    unavailable and proposals are merged automatically)."""
    clock: Clock = utc_now
    local_zone: tzinfo | None = None
    timezone_name: str = "UTC"
    layout: Layout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = Layout(self.settings.home)


def reflection_id_for(request: ReflectionRequest) -> str:
    """Stable per request: a redelivered job reuses its id (and its worktree name)."""
    digest = hashlib.sha256(request.request_id.encode()).hexdigest()[:8]
    return f"{request.requested_at:%Y%m%d%H%M%S}-{digest}"


def run_job(request: ReflectionRequest, job_id: str, ctx: JobContext) -> ReflectionOutcome:
    done = finished_outcome(ctx.redis, job_id)
    if done is not None:
        log.info("reflection_already_finished", job_id=job_id, status=done.status)
        return done
    job = _Job(request, job_id, ctx)
    with structlog.contextvars.bound_contextvars(reflection_id=job.reflection_id):
        outcome = job.run()
        append_outcome(job.reflections_dir, outcome)
        publish_outcome(ctx.redis, job_id, outcome)
        log.info(
            "reflection_finished",
            status=outcome.status,
            reason=outcome.reason,
            seconds=round(outcome.duration_s, 2),
        )
        return outcome


class _Job:
    def __init__(self, request: ReflectionRequest, job_id: str, ctx: JobContext) -> None:
        self.request = request
        self.job_id = job_id
        self.ctx = ctx
        self.reflection_id = reflection_id_for(request)
        self.started = ctx.clock()
        self.layout = ctx.layout
        self.agent_dir = self.layout.agent_dir(request.agent_id)
        self.reflections_dir = self.layout.reflections_dir(request.agent_id)
        self.manual = request.trigger == "manual"
        self.lease: ReflectionLease | None = None

    def outcome(
        self,
        status: str,
        reason: str | None = None,
        message: str = "",
        commits: list[str] | None = None,
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
            started_at=self.started,
            finished_at=self.ctx.clock(),
        )

    def skipped(self, reason: str, message: str) -> ReflectionOutcome:
        return self.outcome("skipped", reason, message)

    def run(self) -> ReflectionOutcome:
        memory_dir = self.agent_dir / "memory"
        if not (memory_dir / ".git").is_dir():
            return self.skipped("memfs_disabled", "The agent has no memory repo.")
        if not self.manual:
            state = backoff.load_backoff(self.reflections_dir)
            if backoff.deferred(state, self.ctx.clock()):
                return self.skipped("retry_backoff", f"Retrying after {state.retry_at}.")
            if state.configuration_error:
                return self.skipped(
                    "configuration_error",
                    "Automatic reflection is paused until the model configuration is fixed "
                    f"({state.configuration_error}); `agentctl reflect` retries.",
                )
        lease = self.lease = self._lease()
        if lease is not None and not lease.acquire():
            self._keep_as_follow_up()
            return self.skipped("already_active", "Another reflection is running; queued.")
        try:
            return self._reflect(memory_dir)
        except AgentdError as exc:
            log.warning("reflection_error", error=exc.message)
            return self.outcome("failed", "error", f"{exc.message}; the transcript can be retried.")
        finally:
            if lease is not None:
                lease.release()
            self._send_follow_up()

    def _lease(self) -> ReflectionLease | None:
        if self.ctx.redis is None:
            return None
        return ReflectionLease(
            self.ctx.redis,
            self.request.agent_id,
            owner=self.job_id,
            ttl_s=self.ctx.settings.reflection_lease_s,
        )

    def _keep_as_follow_up(self) -> None:
        if self.ctx.redis is None:
            return
        try:
            self.ctx.redis.set(
                keys.follow_up(self.request.agent_id),
                self.request.model_dump_json(),
                ex=keys.FOLLOW_UP_TTL_S,
            )
        except redis.RedisError as exc:
            log.warning("follow_up_not_recorded", error=str(exc))

    def _send_follow_up(self) -> None:
        if self.ctx.redis is None:
            return
        try:
            raw = self.ctx.redis.getdel(keys.follow_up(self.request.agent_id))
        except redis.RedisError:
            return
        if raw:
            follow_up = ReflectionRequest.model_validate_json(raw)
            if follow_up.request_id != self.request.request_id:
                self.ctx.send_follow_up(follow_up)

    def _reflect(self, memory_dir: Path) -> ReflectionOutcome:
        worktrees_dir = self.reflections_dir / "worktrees"
        sweep_orphans(memory_dir, worktrees_dir, {self.reflection_id})
        with MemoryRepo(memory_dir) as repo:
            if repo.is_dirty():
                return self.skipped(
                    "parent_dirty", "The memory repo has uncommitted changes; will retry later."
                )
        slices = self._slices()
        if not slices:
            return self.skipped("no_payload", "Nothing new to reflect on.")
        payload = write_payload(
            self.reflections_dir / "payloads",
            self.request.agent_id,
            [(s, slice_records(self._log(s.conversation_id), s)) for s in slices],
            instruction=self.request.instruction,
            clock=self.ctx.clock,
        )
        for kept in payload.slices:
            mark_started(self._conversation_dir(kept.conversation_id), self.ctx.clock())
        worktree = create_worktree(
            memory_dir,
            worktrees_dir,
            self.reflection_id,
            author_email=f"{self.request.agent_id}~reflection@agentd.local",
        )
        try:
            run = self._run_subagent(worktree.path, payload)
            result = self._finalize(worktree, run, memory_dir)
        except BaseException:
            finalize(worktree, should_merge=False)
            raise
        return self._conclude(payload, run, result, memory_dir, worktree.base_head)

    def _finalize(self, worktree: Worktree, run: SubagentRun, memory_dir: Path) -> FinalizeResult:
        """Merge by the harness, or (explicit mode) let the agent merge and ask git.

        Only while this job still holds the agent's lease: a job whose lease expired (its
        renewals stalled) may no longer be the only reflection of the agent."""
        if self.lease is not None and not self.lease.still_held():
            raise ReflectionError(
                "the reflection lease expired during the job, so another job may own the "
                "agent now; nothing was merged"
            )
        agent = AgentStore(self.layout).get(self.request.agent_id)
        mode = resolve(configured_defaults(self.ctx.settings), agent.reflection)
        explicit = mode.merge == "explicit" and self.ctx.agent_provider_for is not None
        if not (run.success and explicit and has_proposal(worktree)):
            return finalize(
                worktree,
                should_merge=run.success,
                failure_summary=None if run.success else run.reason,
            )
        assert self.ctx.agent_provider_for is not None
        integration = asyncio.run(
            run_integration(
                provider=self.ctx.agent_provider_for(agent),
                agent=agent,
                memory_dir=memory_dir,
                home=self.layout.home,
                worktree=worktree,
                reflection_id=self.reflection_id,
                instructions=mode.merge_instructions,
                conversation_dir=self.reflections_dir / "integrations",
                clock=self.ctx.clock,
            )
        )
        log.info("reflection_integration_finished", stop_reason=integration.stop_reason)
        return finalize(
            worktree,
            should_merge=True,
            require_already_merged=True,
            failure_summary=integration.error_message or integration.report or None,
        )

    def _slices(self) -> list[Slice]:
        conversation_ids = list(self.request.conversation_ids)
        if self.request.recent:
            conversation_ids += self._recent(self.request.recent)
        slices: list[Slice] = []
        for conversation_id in dict.fromkeys(conversation_ids):
            log_path = self._log(conversation_id)
            state = load_state(self._conversation_dir(conversation_id))
            found = select_slice(log_path, state.watermark, until_offset=_size(log_path))
            if found is None and self.manual and len(conversation_ids) > 1:
                found = replay_slice(log_path)
            if found is not None:
                slices.append(found)
        return slices

    def _recent(self, count: int) -> list[str]:
        conversations = self.layout.conversations_dir(self.request.agent_id)
        logs = sorted(
            conversations.glob("*/messages.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        return [path.parent.name for path in logs[:count]]

    def _run_subagent(self, worktree: Path, payload: PayloadFile) -> SubagentRun:
        agent = AgentStore(self.layout).get(self.request.agent_id)
        first, last = payload.slices[0], payload.slices[-1]
        now = self.ctx.clock().astimezone(self.ctx.local_zone)
        return asyncio.run(
            run_reflection_subagent(
                provider=self.ctx.provider_for(agent),
                worktree=worktree,
                payload_path=payload.path,
                parent_agent_id=agent.id,
                job_id=self.reflection_id,
                first_id=first.start_id,
                last_id=last.end_id,
                parent_snapshot=parent_snapshot(worktree),
                is_manifest=payload.is_manifest,
                instruction=self.request.instruction,
                conversation_dir=self.reflections_dir / "subagents",
                now=now,
                timezone_name=self.ctx.timezone_name,
                max_steps=SUBAGENT_MAX_STEPS,
                clock=self.ctx.clock,
            )
        )

    def _conclude(
        self,
        payload: PayloadFile,
        run: SubagentRun,
        result: FinalizeResult,
        memory_dir: Path,
        base_head: str,
    ) -> ReflectionOutcome:
        configuration_error = run.error_code if run.error_code in CONFIGURATION_ERRORS else None
        backoff.record_result(
            self.reflections_dir,
            consumed=result.consumed,
            integration_failure=result.status != "failed" or result.failure_phase == "integration",
            configuration_error=configuration_error,
            now=self.ctx.clock(),
        )
        if result.consumed:
            for kept in payload.slices:
                if kept.mode == "unreflected":
                    advance(
                        self._conversation_dir(kept.conversation_id), kept, clock=self.ctx.clock
                    )
            commits = _commits(memory_dir, base_head) if result.status == "merged" else []
            return self.outcome(result.status, None, result.message, commits)
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
            "failed", reason, f"{_explain(reason, result)}; the transcript can be retried."
        )

    def _conversation_dir(self, conversation_id: str) -> Path:
        return self.layout.conversation_dir(self.request.agent_id, conversation_id)

    def _log(self, conversation_id: str) -> Path:
        return self._conversation_dir(conversation_id) / "messages.jsonl"


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _commits(memory_dir: Path, base_head: str) -> list[str]:
    """Short shas of what the merge brought onto main since the job started, newest first."""
    merged = []
    with MemoryRepo(memory_dir) as repo:
        for commit in repo.log(50):
            if commit.sha == base_head:
                break
            merged.append(commit.short_sha)
    return merged


def _explain(reason: str | None, result: FinalizeResult) -> str:
    return {
        "not_read": "the reflector never read the transcript",
        "empty_report": "the reflector gave no report",
        "max_steps": "the reflector ran out of steps",
        "parent_dirty": "the memory repo had uncommitted changes",
        "merge_conflict": "its updates conflicted with newer memory changes",
        "dirty_uncommitted": "its changes were not committed cleanly",
    }.get(reason or "", result.message or (reason or "failed"))
