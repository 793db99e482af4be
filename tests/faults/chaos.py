"""The chaos bench of issue 9: kill -9 parts of a running stack mid-way, again and again,
and check after each kill that nothing the user said was lost, doubled or stalled.

    .venv/bin/python tests/faults/chaos.py [--scenario daemon|worker|stack|valkey|all]
                                           [--runs N] [--latency S] [--seed N] [--keep]

``tests/faults/README.md`` says what each scenario kills, what is checked and how to read
the output; ``scenarios.py`` how each kill point is reached; ``checks.py`` the verdicts.
This module runs the loop: a home and stack per scenario (fresh after a failed run, so
one run's debris never fails the next), a warm-up that times a fault-free fact, then
each run's kill, the wait for the fact, the checks, and the figures.
"""

from __future__ import annotations

import argparse
import logging
import random
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import structlog

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.faults.checks import (
    KINDS,
    Kind,
    Problem,
    Said,
    diagnosis,
    fact_count,
    leftovers,
    message_problems,
    snapshot,
)
from tests.faults.scenarios import SCENARIOS, RunContext, Scenario
from tests.faults.stack import HarnessError, Home, agentctl
from tests.support.waiting import wait_for

LANDED_POLL_S = 0.25
WARM_UP_TIMEOUT_S = 90.0


@dataclass
class RunResult:
    scenario: str
    number: int
    home: Path
    problems: list[Problem]
    note: str = ""
    missed: str | None = None
    landed_s: float | None = None
    details: list[str] = field(default_factory=list)

    def kinds(self) -> set[Kind]:
        return {p.kind for p in self.problems}


@dataclass
class Figures:
    scenario: str
    shape: str
    results: list[RunResult] = field(default_factory=list)
    setup_error: str | None = None

    def count(self, kind: Kind) -> int:
        return sum(kind in r.kinds() for r in self.results)

    @property
    def failed(self) -> bool:
        return self.setup_error is not None or any(r.problems for r in self.results)

    def line(self) -> str:
        landed = [r.landed_s for r in self.results if r.landed_s is not None]
        timing = (
            f"; landed {statistics.median(landed):.1f} s after the restart "
            f"(median), max {max(landed):.1f} s"
            if landed
            else ""
        )
        missed = sum(r.missed is not None for r in self.results)
        return (
            f"{self.scenario:<7} {len(self.results)} runs, {self.count('lost')} lost, "
            f"{self.count('duplicated')} duplicated, {self.count('stalled')} stalled, "
            f"{self.count('left_over')} left over, {self.count('error')} errors; "
            f"{missed} kills missed the window{timing}  [{self.shape}]"
        )


@dataclass
class Options:
    latency_s: float
    stall_s: float
    settle_s: float
    quiet_s: float
    workers: int
    keep: bool
    rng_seed: int


class Bench:
    """One scenario's home and stack; replaced by a fresh pair after a failed run."""

    def __init__(self, scenario: type[Scenario], options: Options) -> None:
        self.kind = scenario
        self.options = options
        self.home: Home | None = None
        self.scenario: Scenario | None = None
        self.home_failed = False
        self.clean_s: float | None = None
        """How long a fault-free fact takes from the chat to memory (the warm-up)."""

    def fresh(self) -> None:
        self.close()
        self.home = Home.create(self.options.latency_s, self.options.workers)
        self.home_failed = False
        stack = self.kind.shape(self.home, self.options.workers)
        self.scenario = self.kind(stack)
        stack.start()
        settings = agentctl(self.home, "sleeptime", "--trigger", "step-count", "--steps", "1")
        if settings.returncode != 0:
            raise HarnessError(f"agentctl sleeptime failed: {settings.stderr.strip()}")
        self._warm_up()

    def _warm_up(self) -> None:
        """A fact said with no kill must land: proves the setup and times a clean run."""
        assert self.home is not None
        token = f"warmup-{secrets.token_hex(3)}"
        started = time.monotonic()
        say_text = f"I always want {token} in replies"
        chat = agentctl(self.home, "chat", "-p", say_text)
        if chat.returncode != 0:
            raise HarnessError(f"the warm-up chat failed: {chat.stderr.strip()}")
        try:
            wait_for(
                lambda: fact_count(self.home, token),
                "the warm-up fact",
                timeout_s=WARM_UP_TIMEOUT_S,
                error=HarnessError,
            )
        except HarnessError as exc:
            since = datetime.now(UTC)
            raise HarnessError(
                f"{exc} (no fault injected)\n    " + "\n    ".join(diagnosis(self.home, since))
            ) from None
        if self.clean_s is None:
            self.clean_s = time.monotonic() - started
        wait_for(
            lambda: not leftovers(self.home),
            "the warm-up to settle",
            timeout_s=self.options.quiet_s,
            error=HarnessError,
        )

    def close(self) -> None:
        if self.scenario is not None:
            self.scenario.stack.stop()
            self.scenario = None
        if self.home is not None and not self.home_failed and not self.options.keep:
            shutil.rmtree(self.home.path, ignore_errors=True)
        self.home = None

    def run(self, number: int) -> RunResult:
        assert self.home is not None and self.scenario is not None and self.clean_s is not None
        home, options = self.home, self.options
        since = datetime.now(UTC)
        ctx = RunContext(
            home=home,
            number=number,
            nonce=secrets.token_hex(3),
            rng=_rng(options.rng_seed, self.kind.name, number),
            latency_s=options.latency_s,
            stall_s=options.stall_s,
            started=since.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        )
        result = RunResult(self.kind.name, number, home.path, [])
        try:
            injection = self.scenario.inject(ctx)
            result.note, result.missed = injection.note, injection.missed
            result.problems += self._judge(ctx, injection.restarted_at, injection.said, result)
        except HarnessError as exc:
            result.problems.append(Problem("error", str(exc)))
        if result.problems:
            self.home_failed = True
            result.details += diagnosis(home, since)
        return result

    def _judge(
        self, ctx: RunContext, restarted_at: float, said: list[Said], result: RunResult
    ) -> list[Problem]:
        home, options = ctx.home, self.options
        assert self.clean_s is not None and self.scenario is not None
        stall_limit = options.stall_s + self.clean_s
        problems: list[Problem] = []
        deaths: dict[str, float] = {}
        casualties = self.scenario.stack.casualties
        landed_at = _landed(
            home,
            ctx.token,
            restarted_at + stall_limit,
            restarted_at + options.settle_s,
            result.details,
            casualties,
            deaths,
        )
        if landed_at is None:
            problems.append(
                Problem(
                    "lost",
                    f"{ctx.fact!r} is not in memory {options.settle_s:.0f} s after the restart",
                )
            )
        else:
            result.landed_s = landed_at - restarted_at
            if result.landed_s > stall_limit:
                problems.append(
                    Problem(
                        "stalled",
                        f"the fact landed {result.landed_s:.1f} s after the restart; the limit "
                        f"is {options.stall_s:.0f} s + {self.clean_s:.1f} s (a clean run)",
                    )
                )
        left: list[str] = []
        deadline = time.monotonic() + options.quiet_s
        while (left := leftovers(home)) and time.monotonic() < deadline:
            time.sleep(LANDED_POLL_S)
        problems += [
            Problem("left_over", f"{what} (still there after {options.quiet_s:.0f} s more)")
            for what in left
        ]
        for death in casualties():
            deaths.setdefault(death, time.monotonic())
        problems += [
            Problem(
                "error",
                f"{death}, seen {seen - restarted_at:.1f} s after the restart; "
                "the bench did not kill it",
            )
            for death, seen in deaths.items()
        ]
        count = fact_count(home, ctx.token)
        if count > 1:
            problems.append(Problem("duplicated", f"{ctx.fact!r} is in memory {count} times"))
        problems += message_problems(home, said)
        return problems


def _landed(
    home: Home,
    token: str,
    stall_at: float,
    deadline: float,
    seen_at_stall: list[str],
    casualties: Callable[[], list[str]],
    deaths: dict[str, float],
) -> float | None:
    """When the token was first seen in memory, or None by the deadline. If it is not
    there when ``stall_at`` passes, what the agent's state was then goes to
    ``seen_at_stall`` (the state at the end of a stalled run says little); every process
    of the stack seen dead goes to ``deaths`` with when it was first seen so."""
    while True:
        now = time.monotonic()
        for death in casualties():
            deaths.setdefault(death, now)
        try:
            if fact_count(home, token):
                return now
        except HarnessError:
            pass  # a ref moving under git grep; look again
        if now > deadline:
            return None
        if not seen_at_stall and now > stall_at:
            seen_at_stall += [f"at the stall limit: {line}" for line in snapshot(home)]
        time.sleep(LANDED_POLL_S)


def _rng(seed: int, scenario: str, number: int) -> random.Random:
    return random.Random(f"{seed}:{scenario}:{number}")


def run_scenario(kind: type[Scenario], runs: int, options: Options, figures: Figures) -> None:
    """Fill ``figures`` run by run (so an interrupted scenario still reports what it did)."""
    bench = Bench(kind, options)
    print(f"── {kind.name}: {runs} runs on {kind.shape.shape}", flush=True)
    try:
        bench.fresh()
        assert bench.clean_s is not None and bench.home is not None
        print(f"   warm-up: a fact with no kill landed in {bench.clean_s:.1f} s", flush=True)
        for number in range(1, runs + 1):
            result = bench.run(number)
            figures.results.append(result)
            _print_run(result, runs)
            if result.problems and number < runs:
                print(f"   (kept {result.home}; next run on a fresh home)", flush=True)
                bench.fresh()
    except HarnessError as exc:
        figures.setup_error = str(exc)
        print(f"   SETUP FAILED: {exc}", flush=True)
        if bench.home is not None:
            bench.home_failed = True
            print(f"   (kept {bench.home.path})", flush=True)
    finally:
        bench.close()
    print(f"   {figures.line()}", flush=True)


def _print_run(result: RunResult, runs: int) -> None:
    verdict = ", ".join(sorted(result.kinds())).upper() or "ok"
    landed = f"landed {result.landed_s:.1f} s after the restart" if result.landed_s else ""
    missed = f"  [kill missed: {result.missed}]" if result.missed else ""
    print(
        f"   {result.scenario} {result.number:>2}/{runs}  {verdict:<10} {landed:<34} "
        f"{result.note}{missed}",
        flush=True,
    )
    for problem in result.problems:
        print(f"      ✗ {problem.kind}: {problem.detail}", flush=True)


def _print_summary(all_figures: list[Figures]) -> None:
    results = [r for f in all_figures for r in f.results]
    counts = {kind: sum(kind in r.kinds() for r in results) for kind in KINDS}
    print()
    for figures in all_figures:
        print(figures.line())
    failures = [r for r in results if r.problems]
    setup = [f for f in all_figures if f.setup_error]
    if failures or setup:
        print("\nFailures:")
    for figures in setup:
        print(f"- {figures.scenario}: setup failed: {figures.setup_error}")
    for result in failures:
        print(f"- {result.scenario} run {result.number} ({result.home}): {result.note}")
        for problem in result.problems:
            print(f"    ✗ {problem.kind}: {problem.detail}")
        for line in result.details:
            print(f"      · {line}")
    print()
    print(
        f"{len(results)} runs, {counts['lost']} lost, {counts['duplicated']} duplicated, "
        f"{counts['stalled']} stalled"
    )
    others = [
        text
        for text in (
            f"{counts['left_over']} left something over" if counts["left_over"] else "",
            f"{counts['error']} hit a bench error" if counts["error"] else "",
            f"{len(setup)} scenario(s) could not start" if setup else "",
        )
        if text
    ]
    if others:
        print("also: " + ", ".join(others))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="kill -9 parts of a running agentd stack mid-way and check nothing is lost"
    )
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--runs", type=int, help="runs per scenario (default: the issue's)")
    parser.add_argument(
        "--latency", type=float, default=1.0, help="AGENTD_MOCK_LATENCY_S: each model call"
    )
    parser.add_argument("--stall-s", type=float, default=30.0, help="allowed extra delay")
    parser.add_argument(
        "--settle-s", type=float, default=90.0, help="after this, a fact not in memory is lost"
    )
    parser.add_argument(
        "--quiet-s", type=float, default=20.0, help="time for leftovers to be cleaned up"
    )
    parser.add_argument("--workers", type=int, default=2, help="reflection workers")
    parser.add_argument("--seed", type=int, help="seed of the kill points (printed)")
    parser.add_argument("--keep", action="store_true", help="keep every home, not only failed")
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.settle_s <= args.stall_s:
        parser.error("--settle-s must exceed --stall-s")
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    options = Options(
        latency_s=args.latency,
        stall_s=args.stall_s,
        settle_s=args.settle_s,
        quiet_s=args.quiet_s,
        workers=args.workers,
        keep=args.keep,
        rng_seed=seed,
    )
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(
        f"chaos bench: seed {seed}, model latency {args.latency} s, stall limit "
        f"{args.stall_s:.0f} s + a clean run, lost after {args.settle_s:.0f} s",
        flush=True,
    )
    all_figures: list[Figures] = []
    try:
        for name in names:
            kind = SCENARIOS[name]
            all_figures.append(Figures(kind.name, kind.shape.shape))
            run_scenario(kind, args.runs or kind.default_runs, options, all_figures[-1])
    except KeyboardInterrupt:
        print("\ninterrupted: figures so far", file=sys.stderr)
    _print_summary(all_figures)
    return 1 if any(f.failed for f in all_figures) else 0


if __name__ == "__main__":
    sys.exit(main())
