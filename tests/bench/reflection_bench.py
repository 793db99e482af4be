"""Reflection workers on any host: what carrying memory as a bundle costs a job, and what a
second worker host buys. Prints figures; asserts nothing.

    python tests/bench/reflection_bench.py [--runs 5] [--agents 20] [--latency 0.5]

1. **Bundle overhead per job**, at memories of 10 KB, 1 MB and 10 MB (markdown-like text
   with a history of 30 commits), against the checkout the worker used to make itself.
   Both paths do the git work of one job whose sub-agent commits one small change, up to
   the commits landing in memory as ``reflection/<id>``:

   - *direct* (before): a depth-1 fetch of memory into a clone beside it, the commit, the
     landing (as the worker did them, on the daemon's host);
   - *bundle* (now): the daemon's snapshot bundle, the bundle through Redis (set and get
     on the embedded Valkey), the worker's clone of it, the commit, its answer bundle
     through Redis, the daemon's clone receiving it (made from the same snapshot) with
     every check, the landing.

   The difference is the overhead; the bundle's bytes are what Redis carries.
2. **Throughput**: ``--agents`` agents each ask for a reflection at once; the mock
   reflector answers every model call after ``--latency`` seconds (a real model's pace).
   Once with one worker (concurrency 1), once with that worker and a second one "on
   another host": in network and mount namespaces of its own, reaching Valkey over TCP
   with a password (where this machine allows it; else a second local worker, which
   measures the same thing). Target: the two together finish at least 1.8× faster.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentd.jobs.checkout import Worktree, collect  # noqa: E402
from agentd.jobs.receive import receive  # noqa: E402
from shared.memory import bundles, git  # noqa: E402
from shared.memory.clone import Clone, init_clone  # noqa: E402
from shared.memory.content import MemoryLimits  # noqa: E402
from shared.memory.repo import MemoryRepo  # noqa: E402
from shared.reflection.job import JobAnswer  # noqa: E402

SIZES = {"10 KB": 10_000, "1 MB": 1_000_000, "10 MB": 10_000_000}
HISTORY = 30
WORDS = [
    "user",
    "prefers",
    "tabs",
    "pnpm",
    "ruff",
    "deploy",
    "staging",
    "review",
    "tests",
    "memory",
    "project",
    "repo",
    "always",
    "never",
    "decided",
    "meeting",
    "Tuesday",
    "port",
    "database",
    "migration",
    "schema",
    "notes",
]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _memory(root: Path, size: int) -> Path:
    """A memory repo of about ``size`` bytes of text in 4 KB to 100 KB files, made over
    :data:`HISTORY` commits."""
    repo = MemoryRepo.create(
        root / "memory", agent_id="a1", agent_name="a1", persona="I help.", human="- tabs"
    )
    repo.close()
    per_file = max(4_000, min(100_000, size // 100))
    files = max(1, size // per_file)
    rng = secrets.SystemRandom(7)
    for commit in range(HISTORY):
        for index in range(commit, files, HISTORY):
            words = " ".join(rng.choice(WORDS) for _ in range(per_file // 7))
            (root / "memory" / "notes").mkdir(exist_ok=True)
            text = f"---\ndescription: note {index}\n---\n{words}\n"
            (root / "memory" / "notes" / f"n{index:05d}.md").write_text(text)
        _git(root / "memory", "add", "-A")
        commit_as = ("-c", "user.name=a", "-c", "user.email=a@x")
        _git(root / "memory", *commit_as, "commit", "-q", "--allow-empty", "-m", f"c{commit}")
    return root / "memory"


def _commit_in(path: Path) -> None:
    human = path / "system" / "human.md"
    human.write_text(human.read_text() + "- likes green tea\n")
    _git(
        path, "-c", "user.name=r", "-c", "user.email=r@x", "commit", "-qam", "feat(reflection): tea"
    )


def _direct(memory: Path, scratch: Path, job: str) -> None:
    """What a worker did before: a depth-1 fetch of memory's HEAD into a clone beside it
    (``git fetch --depth 1``), the commit, the landing."""
    base = _git(memory, "rev-parse", "HEAD")
    path = scratch / "worktrees" / job
    init_clone(path, base, "a1~reflection@x")
    git.run(path, "fetch", "--quiet", "--no-tags", "--depth", "1", str(memory), base)
    git.run(path, "checkout", "--quiet", "-b", f"reflection/{job}", base)
    worktree = Worktree(
        job_id=job,
        path=path,
        branch=f"reflection/{job}",
        base_head=base,
        author_email="a1~reflection@x",
        parent_dir=memory,
    )
    _commit_in(worktree.path)
    assert collect(worktree)
    shutil.rmtree(worktree.path)


def _bundled(memory: Path, scratch: Path, job: str, redis: Any) -> tuple[int, int]:
    base = _git(memory, "rev-parse", "HEAD")
    snapshot = bundles.snapshot(memory, base)
    redis.set(f"bench:in:{job}", snapshot)
    carried = redis.get(f"bench:in:{job}")
    worker = scratch / "worker" / job
    (worker.parent).mkdir(parents=True, exist_ok=True)
    (worker.parent / f"{job}.in").write_bytes(carried)
    clone = Clone(job, worker, f"reflection/{job}", base, "a1~reflection@x")
    init_clone(worker, base, clone.author_email)
    bundles.clone_snapshot(worker.parent / f"{job}.in", worker, clone.branch)
    _commit_in(worker)
    answer_path = worker.parent / f"{job}.answer"
    size = bundles.bundle_commits(worker, base, answer_path)
    assert size is not None
    redis.set(f"bench:out:{job}", answer_path.read_bytes())
    received = scratch / f"{job}.received"
    received.write_bytes(redis.get(f"bench:out:{job}"))
    answer = JobAnswer(
        job_id=job,
        input_id=job,
        reflection_id=job,
        agent_id="a1",
        status="ran",
        head=_git(worker, "rev-parse", "HEAD"),
        commits=_git(worker, "rev-list", "--reverse", "HEAD", f"^{base}").split(),
    )
    worktree = receive(
        memory,
        scratch / "worktrees",
        answer,
        received,
        base_head=base,
        author_email="a1~reflection@x",
        trailers={},
        limits=MemoryLimits(),
    )
    assert collect(worktree)
    shutil.rmtree(worktree.path)
    shutil.rmtree(worker)
    redis.delete(f"bench:in:{job}", f"bench:out:{job}")
    return len(snapshot), size


def _timed(run: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, result


def bundle_overhead(runs: int) -> None:
    print(f"1. bundle overhead per job (the git work of one job, median of {runs} runs)")
    header = ("memory", "direct", "bundle", "overhead", "snapshot", "answer")
    print("   {:>7}  {:>9}  {:>9}  {:>9}  {:>10}  {:>8}".format(*header))
    for label, size in SIZES.items():
        direct_ms, bundle_ms, snapshot_bytes, answer_bytes = _one_size(size, runs)
        print(
            f"   {label:>7}  {direct_ms:7.1f} ms  {bundle_ms:7.1f} ms  "
            f"{bundle_ms - direct_ms:+7.1f} ms  {snapshot_bytes:8,} B  {answer_bytes:6,} B"
        )


def _one_size(size: int, runs: int) -> tuple[float, float, int, int]:
    import redis as redis_py

    from tests.support.workers import RedisForTests

    root = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    server = RedisForTests(root / "home").start()
    client = redis_py.Redis(unix_socket_path=str(server.server.socket_path))
    try:
        memory = _memory(root, size)
        jobs = iter(range(10_000))
        direct_ms, _ = _timed(lambda: _direct(memory, root, f"d{next(jobs)}"), runs)
        bundle_ms, sizes = _timed(lambda: _bundled(memory, root, f"b{next(jobs)}", client), runs)
        return direct_ms, bundle_ms, *sizes
    finally:
        client.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _agents(daemon: Any, count: int) -> list[str]:
    names = []
    for number in range(count):
        name = f"a{number:02d}"
        daemon.result("agent.create", {"name": name})
        daemon.result("chat", {"agent": name, "text": "我更喜欢用 tabs 缩进"})
        names.append(name)
    return names


def _merged(home: Path) -> int:
    count = 0
    for log in home.glob("agents/*/reflections/log.jsonl"):
        count += sum('"status":"merged"' in line for line in log.read_text().splitlines())
    return count


def throughput(agents: int, latency: float) -> None:
    from tests.support import remote as remote_support
    from tests.support.daemon import DaemonRunner
    from tests.support.workers import RedisForTests, WorkerProcess

    reason = remote_support.unavailable()
    print(f"2. {agents} agents reflecting at once, model latency {latency} s a call")
    results: dict[str, float] = {}
    for label in ("one worker", "local + remote"):
        root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir="/tmp"))
        home = root / "home"
        home.mkdir()
        os.environ["AGENTD_HOME"] = str(home)
        os.environ["AGENTD_WORKER_DIR"] = str(root / "worker")
        password = f"pw-{secrets.token_hex(16)}"
        link = remote_support.Link().up() if reason is None and label != "one worker" else None
        listen = (link.host_ip, link.free_port()) if link else None
        server = RedisForTests(home, listen=listen, password=password).start()
        workers: list[Any] = []
        daemon = DaemonRunner(home)
        try:
            env = {"AGENTD_MOCK_LATENCY_S": str(latency), "AGENTD_REDIS_PASSWORD": password}
            workers.append(WorkerProcess(home, "local", **env).start())
            if label != "one worker":
                if link is not None:
                    url = f"redis://:{password}@{listen[0]}:{listen[1]}/0"  # type: ignore[index]
                    out = root / "remote.out"
                    remote = remote_support.RemoteWorker(
                        link, url, out, AGENTD_MOCK_LATENCY_S=str(latency)
                    )
                    workers.append(remote.start())
                else:
                    env["AGENTD_WORKER_DIR"] = str(root / "worker-2")
                    workers.append(WorkerProcess(home, "second", **env).start())
            daemon.start(reflection_wait_s=0, redis_password=password, reflection_trigger="off")
            names = _agents(daemon, agents)
            started = time.perf_counter()
            for name in names:
                daemon.result("reflection.request", {"agent": name})
            while _merged(home) < agents:
                time.sleep(0.05)
            results[label] = time.perf_counter() - started
            where = "in its own namespaces over TCP" if link else f"local ({reason})"
            extra = f"; the second worker {where}" if label != "one worker" else ""
            print(f"   {label:>15}: {results[label]:6.1f} s for {agents} reflections{extra}")
        finally:
            daemon.stop()
            for worker in workers:
                worker.stop()
            server.stop()
            if link is not None:
                link.down()
            shutil.rmtree(root, ignore_errors=True)
    ratio = results["one worker"] / results["local + remote"]
    print(f"   throughput ratio: {ratio:.2f}x (target >= 1.8x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.5)
    args = parser.parse_args()
    for name in list(os.environ):
        if name.startswith("AGENTD_"):
            del os.environ[name]
    os.environ.update(
        {
            "AGENTD_BLOCK_REMOTE_MODELS": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_OFFLINE_MODE": "true",
        }
    )
    from shared.logging import configure

    configure("bench", level="WARNING")
    bundle_overhead(args.runs)
    throughput(args.agents, args.latency)


if __name__ == "__main__":
    main()
