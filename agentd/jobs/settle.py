"""What the daemon does with a worker's answer: check it, merge what it earned, and say how
the job ended — as the one writer of memory.

The answer is checked against the :class:`~agentd.jobs.prepare.Ticket` the daemon kept,
never the other way round: an answer for other inputs is refused; the verdict on the run
(did it read the payload, did it report, how far did it read) is the daemon's own, from
the transcript the worker sent back (kept under ``reflections/subagents/``) and the
payload the daemon wrote (:mod:`shared.reflection.verdict`); the commits are received into
a clone of their own and refused unless they are exactly what the answer claims, built on
the memory sent (:mod:`agentd.jobs.receive`). Then, as before there were workers on other
hosts: they land re-signed and checked (:mod:`agentd.jobs.landing`); a reflection that
would push core memory over its budget fails ``memory_over_budget``; a destructive one is
held for the user (:mod:`agentd.jobs.hold`); finalize merges only a run that earned
success, under the memory lock, or the agent reviews the proposal in explicit merge mode
(:mod:`agentd.jobs.integration`); the watermark moves only for ``merged``, ``no_changes``
and ``held``, and only as far as the sub-agent read.

Whatever goes wrong while settling is a ``failed`` outcome with its reason, never an
exception out of here: every answer ends in one recorded outcome. Settling is safe to
repeat: an answer whose commits memory already holds under the job's id (the daemon died
between the merge and the record) is ``merged`` without merging again.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import ValidationError

from agentd.jobs.budget import floor_at, over_budget
from agentd.jobs.checkout import Worktree, collect
from agentd.jobs.finalize import MERGED_MESSAGE, NO_CHANGES_MESSAGE, FinalizeResult, finalize
from agentd.jobs.gates import feed_backoff, feed_failure
from agentd.jobs.hold import held_message, hold_if_destructive, settle_held
from agentd.jobs.integration import has_proposal, integrate
from agentd.jobs.landing import reflection_trailers
from agentd.jobs.outcome_text import explain, over_budget_message
from agentd.jobs.prepare import Desk, Ticket
from agentd.jobs.receive import receive
from shared.errors import AgentdError, InvalidAnswer
from shared.ids import REFLECTION_SUFFIX
from shared.memory.provenance import commits_between
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.messages import Message
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.reflection import backoff
from shared.reflection.failures import failure_reason
from shared.reflection.job import JOB_FORMAT, JobAnswer, stated_format
from shared.reflection.policy import configured_defaults, resolve
from shared.reflection.slices import Slice
from shared.reflection.state import advance
from shared.reflection.verdict import final_report, judge
from shared.store.agents import AgentStore
from shared.store.atomic import write_bytes_atomic
from shared.store.layout import JobLayout

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Run:
    """The sub-agent's run as the daemon judges it from the transcript it was sent."""

    success: bool
    reason: str
    consumed: list[Slice]
    unread: list[str]
    error_code: str | None
    error_message: str | None


def read_answer(raw: bytes) -> JobAnswer:
    """A stored answer; :class:`InvalidAnswer` for one this daemon cannot read."""
    fmt = stated_format(raw)
    if fmt != JOB_FORMAT:
        raise InvalidAnswer(
            f"the worker answered in format {fmt}, and this daemon reads format {JOB_FORMAT}: "
            "run the same agentd on the daemon's host and the workers'; nothing was merged"
        )
    try:
        return JobAnswer.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidAnswer(f"the worker's answer could not be read: {exc}") from exc


async def settle(
    desk: Desk,
    request: ReflectionRequest,
    ticket: Ticket,
    answer: JobAnswer | Exception,
    bundle: bytes | None,
) -> ReflectionOutcome:
    """The outcome of the job ``request`` sent as ``ticket``, given the worker's
    ``answer`` (or why it could not be read), memory updated as it earned."""
    settling = _Settling(desk, request, ticket)
    try:
        if isinstance(answer, Exception):
            raise answer
        return await settling.run(answer, bundle)
    except Exception as exc:
        return settling.crashed(exc)


class _Settling:
    def __init__(self, desk: Desk, request: ReflectionRequest, ticket: Ticket) -> None:
        self.desk = desk
        self.request = request
        self.ticket = ticket
        self.layout = desk.layout
        self.files = desk.layout.reflection_files(request.agent_id)
        self.memory_dir = desk.layout.memory_dir(request.agent_id)
        self.setup = ""

    def outcome(
        self,
        status: str,
        reason: str | None = None,
        message: str = "",
        commits: list[str] | None = None,
        unread: list[str] | None = None,
    ) -> ReflectionOutcome:
        return self.desk.outcome(
            self.request,
            status,
            reason,
            message,
            started=self.ticket.prepared_at,
            commits=commits,
            unread=unread,
        )

    def crashed(self, exc: Exception) -> ReflectionOutcome:
        reason = failure_reason(exc)
        detail = exc.message if isinstance(exc, AgentdError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AgentdError):
            log.warning("reflection_error", reason=reason, error=detail)
        else:
            log.exception("reflection_settle_crashed", reason=reason)
        if self._agent_kept():
            feed_failure(self.files.directory, reason, now=self.desk.clock())
        return self.outcome("failed", reason, f"{detail}; the transcript can be retried.")

    def _agent_kept(self) -> bool:
        """Whether the agent is still there: one deleted meanwhile gets no file back."""
        return self.layout.agent_dir(self.request.agent_id).is_dir()

    async def run(self, answer: JobAnswer, bundle: bytes | None) -> ReflectionOutcome:
        sent = (self.request.request_id, self.ticket.input_id, self.request.agent_id)
        if (answer.job_id, answer.input_id, answer.agent_id) != sent or (
            answer.status == "ran" and answer.reflection_id != self.ticket.reflection_id
        ):
            raise InvalidAnswer("the worker's answer is for other inputs; nothing was merged")
        self.setup = answer.setup
        if not self._agent_kept():
            return self.outcome("skipped", "agent_deleted", "The agent was deleted.")
        if answer.status != "ran":
            return self.worker_ended(answer)
        messages = await asyncio.to_thread(self._transcript, answer)
        verdict = judge(messages, self.ticket.payload, final_report(messages))
        run = Run(
            success=verdict.success,
            reason=verdict.reason,
            consumed=verdict.consumed,
            unread=verdict.unread,
            error_code=answer.error_code,
            error_message=answer.error_message,
        )
        agent = AgentStore(self.layout).get(self.request.agent_id)
        landed = await asyncio.to_thread(self._landed_before)
        if landed:
            log.info("reflection_already_merged", commits=landed)
            merged = FinalizeResult(
                status="merged",
                commit_count=len(landed),
                message=MERGED_MESSAGE.format(count=len(landed)),
            )
            return await asyncio.to_thread(self._conclude, run, merged, landed)
        worktree = None
        if answer.head is not None:
            worktree = await asyncio.to_thread(self._receive, answer, bundle)
        try:
            ended = await self._decide(agent, worktree, run, answer.uncommitted)
        except BaseException:
            if worktree is not None:
                await asyncio.to_thread(finalize, worktree, should_merge=False)
            raise
        if isinstance(ended, ReflectionOutcome):
            return ended
        return await asyncio.to_thread(self._conclude, run, ended, None)

    def worker_ended(self, answer: JobAnswer) -> ReflectionOutcome:
        """The outcome of a job the worker skipped or failed before (or instead of) a run."""
        if answer.status == "failed":
            feed_failure(self.files.directory, answer.reason or "failed", now=self.desk.clock())
        return self.outcome(answer.status, answer.reason, answer.message)

    def _transcript(self, answer: JobAnswer) -> list[Message]:
        """The sub-agent's messages, kept under ``reflections/subagents/``."""
        try:
            messages: list[Message] = [Message.parse_line(line) for line in answer.transcript]
        except ValidationError as exc:
            raise InvalidAnswer(f"the sub-agent's transcript could not be read: {exc}") from exc
        child = f"{self.request.agent_id}{REFLECTION_SUFFIX}"
        conversation = answer.conversation_id or ""
        path = JobLayout(self.files.subagents).conversation_files(child, conversation).messages
        record = b"".join((line + "\n").encode() for line in answer.transcript)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, record)
        return messages

    def _landed_before(self) -> list[str]:
        """Short shas of the commits memory already holds under this job's id (a settle
        the daemon died in after merging), newest first; empty when none."""
        with MemoryRepo(self.memory_dir) as repo:
            between = commits_between(repo, self.ticket.base_head)
        job = self.ticket.reflection_id
        return [c.short_sha for c in between if c.provenance.job_id == job]

    def _receive(self, answer: JobAnswer, bundle: bytes | None) -> Worktree:
        if bundle is None:
            raise InvalidAnswer("the worker's answer names commits but brought no bundle")
        with tempfile.TemporaryDirectory(prefix="answer-", dir=self._scratch()) as scratch:
            path = Path(scratch) / "answer.bundle"
            path.write_bytes(bundle)
            return receive(
                self.memory_dir,
                self.files.worktrees,
                answer,
                path,
                base_head=self.ticket.base_head,
                author_email=f"{self.request.agent_id}~reflection@agentd.local",
                trailers=reflection_trailers(
                    self.request.agent_id, self.ticket.reflection_id, self.ticket.payload
                ),
                limits=self.desk.settings.memory_limits,
            )

    def _scratch(self) -> Path:
        self.files.worktrees.mkdir(parents=True, exist_ok=True)
        return self.files.worktrees

    async def _decide(
        self, agent: AgentRecord, worktree: Worktree | None, run: Run, uncommitted: list[str]
    ) -> FinalizeResult | ReflectionOutcome:
        """How the job ends for memory: merged, held, over budget, or why not."""
        if worktree is None:
            return _without_commits(run, uncommitted)
        if run.success and not uncommitted and await asyncio.to_thread(collect, worktree):
            stopped = await asyncio.to_thread(self._budget_or_hold, agent, worktree, run)
            if stopped is not None:
                return stopped
        mode = resolve(configured_defaults(self.desk.settings), agent.reflection)
        explicit = run.success and not uncommitted and mode.merge == "explicit"
        if explicit and await asyncio.to_thread(has_proposal, worktree):
            return await integrate(
                provider=self.desk.agent_provider_for(agent),
                agent=agent,
                memory_dir=self.memory_dir,
                worktree=worktree,
                reflection_id=self.ticket.reflection_id,
                instructions=mode.merge_instructions,
                conversation_dir=self.files.integrations,
                clock=self.desk.clock,
                unsandboxed_bash=self.desk.settings.unsandboxed_bash,
            )
        return await asyncio.to_thread(
            finalize,
            worktree,
            should_merge=run.success,
            failure_summary=None if run.success else run.reason,
            uncommitted=uncommitted,
        )

    def _budget_or_hold(
        self, agent: AgentRecord, worktree: Worktree, run: Run
    ) -> ReflectionOutcome | None:
        """The outcome of a landed branch that may not merge: over the core-memory budget,
        or destructive (held for the user); None when it may go on to merge."""
        budget = self.ticket.budget
        floor_after = floor_at(agent, self.memory_dir, worktree.branch)
        if over_budget(budget, floor_after):
            finalize(worktree, should_merge=False, failure_summary="memory over budget")
            backoff.record_result(
                self.files.directory,
                consumed=False,
                backs_off=True,
                pause=None,
                now=self.desk.clock(),
            )
            return self.outcome(
                "failed", "memory_over_budget", over_budget_message(budget, floor_after)
            )
        held = hold_if_destructive(worktree, self.request, self.ticket.reflection_id, self.desk)
        if held is None:
            return None
        finalize(worktree, should_merge=False, failure_summary="held for the user")
        settle_held(run.consumed, self.files.directory, self._conversation_dir, self.desk.clock)
        return self.outcome(
            "held", held.destruction.reason, held_message(held, agent.name), unread=run.unread
        )

    def _conclude(
        self, run: Run, result: FinalizeResult, landed: list[str] | None
    ) -> ReflectionOutcome:
        feed_backoff(
            self.files.directory,
            result,
            error_code=run.error_code,
            error_message=run.error_message,
            setup=self.setup,
            now=self.desk.clock(),
        )
        if result.consumed:
            for read in run.consumed:
                advance(self._conversation_dir(read.conversation_id), read, clock=self.desk.clock)
            commits = landed if landed is not None else []
            if landed is None and result.status == "merged":
                commits = self._commits()
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
        text = explain(reason, result, self.request.agent_id)
        return self.outcome("failed", reason, f"{text}; the transcript can be retried.")

    def _commits(self) -> list[str]:
        """Short shas of what the merge brought onto main since the job was sent, newest
        first."""
        merged = []
        with MemoryRepo(self.memory_dir) as repo:
            for commit in repo.log(50):
                if commit.sha == self.ticket.base_head:
                    break
                merged.append(commit.short_sha)
        return merged

    def _conversation_dir(self, conversation_id: str) -> Path:
        return self.layout.conversation_dir(self.request.agent_id, conversation_id)


def _without_commits(run: Run, uncommitted: list[str]) -> FinalizeResult:
    """How a run that committed nothing ends (finalize's rows 1 to 3, with no clone)."""
    if uncommitted:
        return FinalizeResult(
            status="dirty_uncommitted",
            message="the reflection's memory changes were not committed cleanly",
        )
    if not run.success:
        return FinalizeResult(
            status="failed",
            failure_phase="reflection",
            message=run.reason or "the reflection did not complete cleanly",
        )
    return FinalizeResult(status="no_changes", message=NO_CHANGES_MESSAGE)
