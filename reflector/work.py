"""One reflection job on a worker: its inputs from Redis → gates → the sub-agent in a clone
of the job's memory → an answer for the daemon.

A worker needs nothing but Redis and its own model settings. The job's inputs
(:class:`~shared.reflection.job.JobInput`: the payload, the model, the budget, a bundle
of memory at the commit the daemon sent) are fetched from Redis; the sub-agent runs in a
clone of that bundle in the job's scratch directory (:mod:`reflector.scratch`), in the
sandbox, with the same tools, prompt and step limit as ever; the answer carries its
commits as a bundle, the transcript of what it read, and what it left uncommitted. The
worker never opens the daemon's home, takes no memory lock and merges nothing: the daemon
checks the answer and is the one writer of memory (``agentd/jobs/``).

Gates, in order, each an answer with its reason: the job's format (``worker_outdated``:
this worker runs an older agentd than the daemon), its size (``job_too_large``,
``bundle_corrupt``), the sandbox (``sandbox_unavailable``), the configuration pause for
this worker's model setup (``configuration_error``, automatic runs only), another job
holding the agent's lease (``already_active``, a notice only; a copy of *this* job —
a redelivery — does nothing, since the running one answers), and the try count
(``redelivered``: a job that keeps killing its worker). Whatever goes wrong after, the job
answers ``failed`` with its reason (a time limit, a damaged bundle, a nested repository
the sub-agent made, …), so the daemon always hears how it ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal, Protocol

import redis
import structlog
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from reflector.gates import paused
from reflector.scratch import Scratch, clone_memory, open_scratch
from reflector.snapshot import parent_snapshot
from reflector.subagent import run_reflection_subagent
from shared import sandbox
from shared.agent.tools.view import transcripts_name
from shared.clock import Clock, user_zone, utc_now
from shared.coordination import jobs, transfer
from shared.coordination.lease import ReflectionLease
from shared.errors import AgentdError, BundleError, JobTooLarge, WorkerOutdated
from shared.ids import REFLECTION_SUFFIX
from shared.memory import bundles, git
from shared.memory.clone import Clone, secure, uncommitted
from shared.providers.base import Provider
from shared.reflection.failures import failure_reason
from shared.reflection.job import (
    JOB_FORMAT,
    MAX_TRANSCRIPT_BYTES,
    AnswerStatus,
    JobAnswer,
    JobInput,
    JobMessage,
    stated_format,
)
from shared.settings import Settings
from shared.store.layout import JobLayout

log = structlog.get_logger(__name__)


class Transfer(Protocol):
    """Where a worker's inputs come from and its answers go (Redis, in production)."""

    def load(self, input_id: str) -> tuple[bytes, bytes] | None: ...

    def store(self, answer: JobAnswer, bundle: bytes | None) -> bool: ...

    def announce(self, answer: JobAnswer) -> None: ...


class RedisTransfer:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def load(self, input_id: str) -> tuple[bytes, bytes] | None:
        return transfer.get_input(self.client, input_id)

    def store(self, answer: JobAnswer, bundle: bytes | None) -> bool:
        return transfer.put_answer(self.client, answer, bundle)

    def announce(self, answer: JobAnswer) -> None:
        transfer.announce(self.client, answer)


@dataclass
class WorkerContext:
    settings: Settings
    """This host's settings: where its scratch goes, its model credentials, its limits."""
    redis: redis.Redis | None
    transfer: Transfer
    provider_for: Callable[[JobInput], Provider]
    """The sub-agent's model for a job (the mock reflector for ``mock``)."""
    setup_of: Callable[[JobInput], str]
    """The digest of this worker's model setup for a job (what a pause is compared with)."""
    worker: str = ""
    clock: Clock = utc_now


def agentd_version() -> str:
    try:
        return metadata.version("agentd")
    except metadata.PackageNotFoundError:
        return "unknown"


def run_work(message: dict[str, Any], ctx: WorkerContext) -> JobAnswer | None:
    """Run one job to an answer, stored for the daemon; None for a copy of a job that is
    running or answered already, and for a job whose inputs are gone (the daemon sends
    it again with new ones)."""
    fmt = message.get("format")
    if not isinstance(fmt, int) or fmt > JOB_FORMAT:
        return _outdated(message, ctx, fmt)
    try:
        parsed = JobMessage.model_validate(message)
    except ValidationError as exc:
        log.error("undecodable_reflection_job", error=str(exc))
        return None
    if _done(ctx.redis, parsed):
        log.info("reflection_already_answered", job_id=parsed.job_id)
        return None
    work = _Work(parsed, ctx)
    with structlog.contextvars.bound_contextvars(job_id=parsed.job_id, agent_id=parsed.agent_id):
        try:
            answer = work.run()
        except Exception as exc:
            answer = work.crashed(exc)
        try:
            if answer is None:
                log.info("reflection_copy_not_run", hint="its running copy answers")
            else:
                work.deliver(answer)
                log.info("reflection_answered", status=answer.status, reason=answer.reason)
        finally:
            work.release_lease()
            work.clean_up()
    return answer


def _done(client: redis.Redis | None, message: JobMessage) -> bool:
    """Whether this job has an outcome, or an answer for these inputs."""
    if client is None:
        return False
    try:
        finished = jobs.finished(client, message.job_id) is not None
        return finished or jobs.answered(client, message.job_id) == message.input_id
    except redis.RedisError:
        return False


def _outdated(message: dict[str, Any], ctx: WorkerContext, fmt: object) -> JobAnswer | None:
    """Answer a job this worker cannot read with ``failed: worker_outdated``."""
    ids = {name: message.get(name) for name in ("job_id", "input_id", "agent_id")}
    if not all(isinstance(value, str) for value in ids.values()):
        log.error("undecodable_reflection_job", format=fmt)
        return None
    error = WorkerOutdated(
        f"this worker ({ctx.worker or 'unnamed'}) runs agentd {agentd_version()}, which reads "
        f"jobs of format {JOB_FORMAT}; the daemon sent format {fmt}. Upgrade agentd on the "
        "worker's host and restart it; the transcript can be retried."
    )
    answer = JobAnswer(
        job_id=str(ids["job_id"]),
        input_id=str(ids["input_id"]),
        reflection_id="",
        agent_id=str(ids["agent_id"]),
        worker=ctx.worker,
        version=agentd_version(),
        status="failed",
        reason=error.code,
        message=error.message,
    )
    try:
        ctx.transfer.store(answer, None)
    except redis.RedisError as exc:
        log.error("reflection_answer_not_stored", error=str(exc))
    log.warning("reflection_job_too_new", format=fmt)
    return answer


class _Work:
    def __init__(self, message: JobMessage, ctx: WorkerContext) -> None:
        self.message = message
        self.ctx = ctx
        self.job: JobInput | None = None
        self.setup = ""
        self.started = ctx.clock()
        self.lease: ReflectionLease | None = None
        self.scratch: Scratch | None = None

    def answer(
        self, status: AnswerStatus, reason: str | None = None, message: str = "", **fields: Any
    ) -> JobAnswer:
        return JobAnswer(
            job_id=self.message.job_id,
            input_id=self.message.input_id,
            reflection_id=self.job.reflection_id if self.job else "",
            agent_id=self.message.agent_id,
            worker=self.ctx.worker,
            version=agentd_version(),
            setup=self.setup,
            status=status,
            reason=reason,
            message=message,
            started_at=self.started,
            finished_at=self.ctx.clock(),
            **fields,
        )

    def crashed(self, exc: Exception) -> JobAnswer:
        reason = "time_limit" if isinstance(exc, SoftTimeLimitExceeded) else failure_reason(exc)
        detail = exc.message if isinstance(exc, AgentdError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AgentdError):
            log.warning("reflection_error", reason=reason, error=detail)
        else:
            log.exception("reflection_crashed", reason=reason)
        return self.answer("failed", reason, f"{detail}; the transcript can be retried.")

    def run(self) -> JobAnswer | None:
        loaded = self.ctx.transfer.load(self.message.input_id)
        if loaded is None:
            log.warning("reflection_job_input_gone", hint="the daemon sends the job again")
            return None
        raw, bundle = loaded
        fmt = stated_format(raw)
        if isinstance(fmt, int) and fmt > JOB_FORMAT:
            return _outdated(self.message.model_dump() | {"format": fmt}, self.ctx, fmt)
        if fmt != JOB_FORMAT:
            raise BundleError(f"the job's inputs say they are of format {fmt}, not a job's")
        try:
            self.job = JobInput.model_validate_json(raw)
        except ValidationError as exc:
            raise BundleError(f"the job's inputs could not be read: {exc}") from exc
        self._check_size(bundle)
        if not (sandbox.available() or self.ctx.settings.unsandboxed_bash):
            return self.answer(
                "failed",
                "sandbox_unavailable",
                f"The reflection's shell runs only in bubblewrap, and {sandbox.reason()} on "
                f"{self.ctx.worker or 'the worker'}. Install bubblewrap there "
                "(`apt-get install bubblewrap`), or set AGENTD_UNSANDBOXED_BASH=1 to let it "
                "run unconfined; the transcript can be retried.",
            )
        self.setup = self.ctx.setup_of(self.job)
        closed = paused(self.job, self.setup)
        if closed is not None:
            return self.answer("skipped", *closed)
        if self.ctx.redis is not None:
            early = self._take_lease()
            if early is not False:
                return early
        return self._reflect(self.job, bundle)

    def _check_size(self, bundle: bytes) -> None:
        limit = self.ctx.settings.reflection_job_max_bytes
        if len(bundle) > limit:
            raise JobTooLarge(
                f"the job's memory bundle is {len(bundle):,} bytes, over this worker's "
                f"AGENTD_REFLECTION_JOB_MAX_BYTES ({limit:,})"
            )
        if len(bundle) != self.message.input_bytes:
            raise BundleError(
                f"the job's memory bundle is {len(bundle):,} bytes, not the "
                f"{self.message.input_bytes:,} it was sent as"
            )

    def _take_lease(self) -> JobAnswer | Literal[False] | None:
        """The agent's lease; False once held, else what the job answers instead."""
        assert self.ctx.redis is not None and self.job is not None
        lease = ReflectionLease(
            self.ctx.redis,
            self.message.agent_id,
            owner=self.message.job_id,
            ttl_s=self.ctx.settings.reflection_lease_s,
        )
        if not lease.acquire():
            if lease.holder() == self.message.job_id or _done(self.ctx.redis, self.message):
                return None
            return self.answer(
                "skipped", "already_active", "Another reflection is running; queued."
            )
        self.lease = lease
        if _done(self.ctx.redis, self.message):
            return None
        jobs.mark(self.ctx.redis, self.message.job_id, "running")
        tries = jobs.count_try(self.ctx.redis, self.message.job_id)
        if tries > self.ctx.settings.reflection_max_tries:
            return self.answer(
                "failed",
                "redelivered",
                f"This job was started {tries} times without finishing (its worker died "
                "each time); it is not run again. See the worker logs; `agentctl reflect` "
                "asks for a new one.",
            )
        return False

    def _reflect(self, job: JobInput, bundle: bytes) -> JobAnswer:
        self.scratch = scratch = open_scratch(self.ctx.settings.worker_dir, job.reflection_id)
        clone = clone_memory(
            scratch,
            bundle,
            job.reflection_id,
            job.base_head,
            author_email=f"{job.request.agent_id}~reflection@agentd.local",
        )
        payload = job.payload_in(scratch.transcript, transcripts_name())
        zone, zone_name = user_zone(job.timezone)
        run = asyncio.run(
            run_reflection_subagent(
                provider=self.ctx.provider_for(job),
                checkout=clone.path,
                payload=payload,
                parent_agent_id=job.request.agent_id,
                job_id=job.reflection_id,
                parent_snapshot=parent_snapshot(clone.path),
                instruction=job.request.instruction,
                conversation_dir=scratch.conversations,
                now=self.ctx.clock().astimezone(zone),
                timezone_name=zone_name,
                max_steps=job.max_steps,
                output_chars=job.output_chars,
                unsandboxed_bash=self.ctx.settings.unsandboxed_bash,
                memory_budget=job.memory_budget,
                clock=self.ctx.clock,
            )
        )
        transcript = self._transcript(scratch, run.conversation_id)
        refused = secure(clone)  # a nested repository raises: the job fails with it
        if refused is not None:
            return self.answer(
                "failed", "untrusted_checkout", f"{refused}; the transcript can be retried."
            )
        commits, size = self._commits(clone, scratch)
        return self.answer(
            "ran",
            head=commits[-1] if commits else None,
            commits=commits,
            uncommitted=uncommitted(clone),
            transcript=transcript,
            conversation_id=run.conversation_id,
            error_code=run.error_code,
            error_message=run.error_message,
            bundle_bytes=size,
        )

    def _transcript(self, scratch: Scratch, conversation_id: str) -> list[str]:
        child = f"{self.message.agent_id}{REFLECTION_SUFFIX}"
        layout = JobLayout(scratch.conversations)
        path = layout.conversation_files(child, conversation_id).messages
        if path.stat().st_size > MAX_TRANSCRIPT_BYTES:
            raise JobTooLarge(
                f"the sub-agent's transcript is {path.stat().st_size:,} bytes, over the "
                f"{MAX_TRANSCRIPT_BYTES:,} an answer may carry"
            )
        return path.read_text(encoding="utf-8").splitlines()

    def _commits(self, clone: Clone, scratch: Scratch) -> tuple[list[str], int]:
        """The commits the clone made after its base, oldest first, bundled; their bundle's
        size."""
        size = bundles.bundle_commits(clone.path, clone.base_head, scratch.answer_bundle)
        if size is None:
            return [], 0
        limit = self.ctx.settings.reflection_job_max_bytes
        if size > limit:
            raise JobTooLarge(
                f"the reflection's commits make a bundle of {size:,} bytes, over "
                f"AGENTD_REFLECTION_JOB_MAX_BYTES ({limit:,})"
            )
        listed = git.run(clone.path, "rev-list", "--reverse", "HEAD", f"^{clone.base_head}")
        return listed.stdout.split(), size

    def deliver(self, answer: JobAnswer) -> None:
        """Store the answer (or, for a busy agent, only announce it), trying through a
        Redis restart for as long as a lease lasts: the answer is the job's whole result,
        and past that the daemon owns the job again (it finds the lease gone and sends the
        job anew)."""
        bundle = None
        if answer.head is not None and self.scratch is not None:
            bundle = self.scratch.answer_bundle.read_bytes()
        deadline = time.monotonic() + self.ctx.settings.reflection_lease_s
        while True:
            try:
                if answer.reason == "already_active":
                    self.ctx.transfer.announce(answer)
                elif not self.ctx.transfer.store(answer, bundle):
                    log.info("reflection_answered_second", hint="a copy of the job answered first")
                return
            except redis.RedisError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("reflection_answer_waits_for_redis", error=str(exc))
                time.sleep(1.0)

    def release_lease(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def clean_up(self) -> None:
        if self.scratch is not None:
            self.scratch.remove()
            self.scratch = None
