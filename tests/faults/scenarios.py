"""The four kills of issue 9: each is what a user does, a SIGKILL at a point known to be
mid-way, and the restart.

Each run says one durable fact, ``I always want fact-<run>-<nonce> in replies`` (the mock
reflector keeps lines with "always"), with the reflection trigger at every step, so the
turn that carries the fact asks for a reflection. What "mid-way" means and how the bench
knows it is there:

- ``daemon`` (30 by default): mid-turn. ``agentctl chat`` is in flight and its user
  message is already in ``messages.jsonl`` (the daemon persists it before calling the
  model, which takes ``AGENTD_MOCK_LATENCY_S``); the kill lands at a random point of that
  model call. The client's chat fails. The bench restarts ``agentd serve`` and the user
  says one more (non-durable) thing. Expected: the persisted fact message is kept exactly
  once, and the fact is reflected after that next completed turn, whose step-count
  trigger covers both messages.
- ``worker`` (30): mid-job. The fact's chat was answered, Redis says a worker runs the job
  (a worker keeps nothing of it in the home) and the fact is not merged yet; the kill
  lands at a random point of the sub-agent's run (every step of the mock reflector takes
  the latency).
  Odd runs kill the worker's prefork pool process (Celery's main process replaces it and
  the job is redelivered), even runs the whole worker (main and pool; the bench restarts
  it as a supervisor would). Nothing else is said: the reflection must resume by itself.
- ``stack`` (10): mid-reflection, as above, but every process of ``agentd up`` (the
  supervisor, the daemon, the workers, the embedded Valkey) is killed at once, then
  ``agentd up`` is run again.
- ``valkey`` (10): mid-job, the embedded Valkey of ``agentd up`` is killed; restarting it
  is the stack's job, not the bench's.

"Restarted at" is when the bench's restart finished (daemon answering, worker ready,
``agentd up`` ready), or the moment of the kill where the product itself must restart
the part (a pool process, Valkey).
"""

from __future__ import annotations

import random
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from tests.faults.checks import Said, fact_count, persisted
from tests.faults.stack import (
    HarnessError,
    Home,
    Pieces,
    Up,
    agentctl,
    agentctl_in_background,
    kill_hard,
)
from tests.support.waiting import ceiling, wait_for

JOB_START_TIMEOUT_S = 30.0
PERSIST_TIMEOUT_S = 15.0


@dataclass
class RunContext:
    home: Home
    number: int
    nonce: str
    rng: random.Random
    latency_s: float
    stall_s: float
    started: str
    """When the run began, as log lines stamp time (ISO 8601, UTC, ``Z``)."""

    @property
    def token(self) -> str:
        """What the bench looks for in memory: unique to this run."""
        return f"fact-{self.number}-{self.nonce}"

    @property
    def fact(self) -> str:
        return f"I always want {self.token} in replies"


@dataclass
class Injection:
    restarted_at: float
    """``time.monotonic()`` when the stack was whole again (see the module docstring)."""
    said: list[Said]
    note: str
    """Where the kill landed, for the run's line."""
    missed: str | None = None
    """Why the kill did not land mid-way (the run is still checked, and counted apart)."""


def say(ctx: RunContext, text: str) -> Said:
    """One ``agentctl chat -p``, which must be answered."""
    chat = agentctl(ctx.home, "chat", "-p", text)
    if chat.returncode != 0:
        raise HarnessError(f"agentctl chat -p {text!r} failed: {chat.stderr.strip()}")
    return Said(text, must_be_kept=True)


def wait_for_job(ctx: RunContext) -> str:
    """The id of the reflection job, once a worker runs it."""
    found = wait_for(
        ctx.home.running_job,
        "a worker to run the job",
        timeout_s=JOB_START_TIMEOUT_S,
        error=HarnessError,
    )
    return str(found)


def job_unfinished(ctx: RunContext, job: str) -> str | None:
    """None while the job is mid-way; otherwise why it is not."""
    if ctx.home.running_job() != job:
        return "the job had answered before the kill"
    if fact_count(ctx.home, ctx.token):
        return "the fact was merged before the kill"
    return None


def sleep_into_job(ctx: RunContext) -> float:
    """A random point of the sub-agent's run: the mock reflector makes five model calls
    (read, read memory, edit, commit, report), each ``latency_s`` long."""
    delay = ctx.rng.uniform(0.0, 4.0 * ctx.latency_s)
    time.sleep(delay)
    return delay


def into_the_job(ctx: RunContext) -> tuple[list[Said], float, str | None]:
    """Say the run's fact and wait until its reflection job is at a random point of its
    run: what was said, how far into the job, and why the kill would miss it (or None)."""
    said = [say(ctx, ctx.fact)]
    job = wait_for_job(ctx)
    delay = sleep_into_job(ctx)
    return said, delay, job_unfinished(ctx, job)


class Scenario(ABC):
    name: ClassVar[str]
    default_runs: ClassVar[int]
    shape: ClassVar[type[Pieces] | type[Up]]

    def __init__(self, stack: Pieces | Up) -> None:
        self.stack = stack

    @abstractmethod
    def inject(self, ctx: RunContext) -> Injection:
        """Say the fact, kill mid-way, restart; what was said and when the stack was whole."""


class DaemonMidTurn(Scenario):
    name = "daemon"
    default_runs = 30
    shape = Pieces

    def inject(self, ctx: RunContext) -> Injection:
        assert isinstance(self.stack, Pieces)
        client = agentctl_in_background(ctx.home, "chat", "-p", ctx.fact)
        try:
            wait_for(
                lambda: persisted(ctx.home, ctx.fact),
                "the chat's user message to reach messages.jsonl",
                timeout_s=PERSIST_TIMEOUT_S,
                error=HarnessError,
            )
        except HarnessError:
            client.kill()
            client.wait(10)
            raise
        delay = ctx.rng.uniform(0.0, 0.6 * ctx.latency_s)
        time.sleep(delay)
        missed = "the turn had ended before the kill" if client.poll() is not None else None
        self.stack.kill_daemon()
        try:
            _out, err = client.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait(10)
            raise HarnessError("agentctl chat hung after the daemon was killed") from None
        if client.returncode == 0 and missed is None:
            missed = "the chat was answered before the kill"
        self.stack.start_daemon()
        restarted_at = time.monotonic()
        follow_up = say(ctx, f"go on, run {ctx.number} ({ctx.nonce})")
        client_saw = err.strip().splitlines()[-1] if err.strip() else "exit 0"
        return Injection(
            restarted_at,
            [Said(ctx.fact, must_be_kept=True), follow_up],
            f"killed {delay:.2f} s after the message was persisted; agentctl: {client_saw}",
            missed,
        )


class WorkerMidJob(Scenario):
    name = "worker"
    default_runs = 30
    shape = Pieces

    def inject(self, ctx: RunContext) -> Injection:
        assert isinstance(self.stack, Pieces)
        said, delay, missed = into_the_job(ctx)
        worker = self.stack.worker_running(ctx.started)
        if ctx.number % 2:
            pool = self.stack.pool_children(worker)
            if not pool:
                raise HarnessError(f"{worker.name} has no pool process to kill")
            kill_hard(pool)
            restarted_at = time.monotonic()
            what = f"{worker.name}'s pool process"
        else:
            worker.kill_hard()
            self.stack.start_worker(worker)
            restarted_at = time.monotonic()
            what = f"{worker.name} (whole worker, restarted by the bench)"
        return Injection(restarted_at, said, f"{what} killed {delay:.2f} s into the job", missed)


class StackMidReflection(Scenario):
    name = "stack"
    default_runs = 10
    shape = Up

    def inject(self, ctx: RunContext) -> Injection:
        assert isinstance(self.stack, Up)
        said, delay, missed = into_the_job(ctx)
        killed = self.stack.kill_all()
        self.stack.start()
        return Injection(
            time.monotonic(),
            said,
            f"{len(killed)} processes killed {delay:.2f} s into the job; agentd up run again",
            missed,
        )


class ValkeyMidJob(Scenario):
    name = "valkey"
    default_runs = 10
    shape = Up

    def inject(self, ctx: RunContext) -> Injection:
        assert isinstance(self.stack, Up)
        said, delay, missed = into_the_job(ctx)
        valkey = self.stack.valkey_pid()
        if valkey is None:
            raise HarnessError("agentd up runs no valkey-server (or redis-server) process")
        kill_hard([valkey])
        killed_at = time.monotonic()
        try:
            wait_for(
                self.stack.valkey_answers,
                "Valkey to answer again",
                timeout_s=ctx.stall_s,
                error=HarnessError,
            )
            back = f"Valkey answered again {time.monotonic() - killed_at:.1f} s later"
        except HarnessError:
            back = f"Valkey was not back within {ceiling(ctx.stall_s):.0f} s"
        return Injection(
            killed_at, said, f"valkey-server killed {delay:.2f} s into the job; {back}", missed
        )


SCENARIOS: dict[str, type[Scenario]] = {
    s.name: s for s in (DaemonMidTurn, WorkerMidJob, StackMidReflection, ValkeyMidJob)
}
