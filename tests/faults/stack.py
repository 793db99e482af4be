"""The stack under test, run the way a user runs it and killed the way a crash kills it.

Two shapes. :class:`Pieces` starts the embedded Valkey, ``agentd serve`` and the
reflection workers one by one, so the bench can kill one part and restart it the way a
supervisor would (what is measured is the product's recovery, not a restart policy).
:class:`Up` is ``agentd up``, the one-command stack, which must restart its own parts.

Every kill is SIGKILL of processes found by pid: a process tree is frozen with SIGSTOP
first, so no parent (the supervisor, a Celery main process) can fork a replacement
between the kills. Only processes this bench started are touched: the tree of a child
it spawned, or processes whose environment carries this bench's ``AGENTD_HOME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd.stack.supervisor import worker_command
from shared.coordination import redis_keys
from shared.coordination.embedded import ping
from shared.store.layout import Layout
from tests.support.processes import answers_status, final_answer
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests

ROOT = Path(__file__).resolve().parents[2]
"""The checkout whose code the stack runs: every child starts here, with it on its path."""
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 40.0


class HarnessError(Exception):
    """The bench could not do one of its own steps (start, find a job, chat…): the run
    is reported as an error with this message, never as a pass."""


# --- the data directory ---------------------------------------------------------------------


@dataclass
class Home:
    """One ``AGENTD_HOME`` under /tmp (short: the Unix socket path must stay ≤ 107 bytes)
    and the environment every process of the bench gets for it."""

    path: Path
    env: dict[str, str]

    @classmethod
    def create(cls, latency_s: float, workers: int) -> Home:
        path = Path(tempfile.mkdtemp(prefix="agentd-chaos-", dir="/tmp"))
        env = {k: v for k, v in os.environ.items() if k not in ("AGENTD_HOME", "AGENTD_REDIS_URL")}
        env.update(
            AGENTD_HOME=str(path),
            AGENTD_MOCK_LATENCY_S=str(latency_s),
            AGENTD_REFLECTION_WAIT_S="0",
            AGENTD_WORKERS=str(workers),
            AGENTD_LOG_FORMAT="json",
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        return cls(path, env)

    @property
    def layout(self) -> Layout:
        return Layout(self.path)

    @property
    def valkey_socket(self) -> Path:
        return self.layout.embedded_redis_socket

    def agent_id(self) -> str:
        agents = sorted(p.name for p in self.layout.agents_dir.iterdir() if p.is_dir())
        if len(agents) != 1:
            raise HarnessError(f"expected one agent in {self.layout.agents_dir}, found {agents}")
        return agents[0]

    def memory_dir(self) -> Path:
        return self.layout.memory_dir(self.agent_id())

    def reflections_dir(self) -> Path:
        return self.layout.reflections_dir(self.agent_id())

    def worktrees(self) -> list[str]:
        directory = self.reflections_dir() / "worktrees"
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def outbox(self) -> list[Path]:
        return sorted((self.reflections_dir() / "outbox").glob("*.json"))

    def running_job(self) -> str | None:
        """The id of the agent's sent job while a worker runs it (Redis says so: a worker
        keeps nothing of a job in the home)."""
        import redis

        client = redis.Redis(unix_socket_path=str(self.valkey_socket), socket_timeout=2)
        try:
            for sent in self.outbox():
                state = client.get(redis_keys.job_state(sent.stem))
                if state is not None and b'"running"' in state:
                    return sent.stem
        except redis.RedisError:
            return None
        finally:
            client.close()
        return None

    def message_logs(self) -> list[Path]:
        return sorted(self.layout.conversations_dir(self.agent_id()).glob("*/messages.jsonl"))

    def output(self, name: str) -> Path:
        """Where the bench writes a child's stdout and stderr."""
        self.layout.logs_dir.mkdir(parents=True, exist_ok=True)
        return self.layout.logs_dir / f"bench-{name}.out"


# --- talking to the daemon ------------------------------------------------------------------


def call(home: Home, op: str, params: dict[str, Any] | None = None, timeout_s: float = 10.0) -> Any:
    """One request over the socket protocol; its result, or HarnessError."""
    try:
        message = final_answer(home.layout.socket_path, op, params, timeout_s=timeout_s)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{op}: {exc!r}") from None
    if message is None:
        raise HarnessError(f"{op}: the daemon closed the connection before answering")
    if not message["ok"]:
        raise HarnessError(f"{op}: {message.get('error')}")
    return message["result"]


def agentctl(home: Home, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``agentctl ARGS`` as a user runs it; HarnessError if it does not return in time."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "agentd.client", *args],
            env=home.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        command = " ".join(args)
        raise HarnessError(f"agentctl {command} did not return within {timeout_s:.0f} s") from None


def agentctl_in_background(home: Home, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentd.client", *args],
        env=home.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- processes ------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z":
            parents.setdefault(stat[1], []).append(pid)
    found, queue = [], [root]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def home_processes(home: Home) -> list[int]:
    """Live processes whose environment carries this home (every process we started for it)."""
    marker = f"AGENTD_HOME={home.path}".encode()
    found = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        stat = _stat(pid)
        if marker in environ.split(b"\0") and stat is not None and stat[0] != "Z":
            found.append(pid)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def kill_hard(roots: list[int], also: Callable[[], list[int]] = list) -> list[int]:
    """SIGKILL ``roots`` and all their descendants (and what ``also`` finds) at once.

    Everything is frozen with SIGSTOP first, until a scan finds nothing new: a frozen
    parent cannot notice a dead child and fork a replacement before it dies itself."""
    frozen: list[int] = []
    while True:
        fresh = [
            pid
            for pid in dict.fromkeys(
                [*roots, *(d for r in [*roots, *frozen] for d in descendants(r)), *also()]
            )
            if pid not in frozen and _stat(pid) is not None
        ]
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        frozen += fresh
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return frozen


class Child:
    """One long-running process of the stack, started by the bench in its own session."""

    def __init__(self, home: Home, name: str, argv: list[str]) -> None:
        self.home = home
        self.name = name
        self.argv = argv
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at_offset = 0
        """Size of the output file when the current process started."""

    def start(self) -> None:
        path = self.home.output(self.name)
        self.started_at_offset = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as output:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.home.env,
                cwd=ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output_since_start(self) -> str:
        path = self.home.output(self.name)
        with open(path, "rb") as output:
            output.seek(self.started_at_offset)
            return output.read().decode(errors="replace")

    def kill_hard(self) -> None:
        if self.alive():
            kill_hard([self.pid])
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of the tree if it does not exit in time."""
        if not self.alive():
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill_hard()

    def wait_ready(self, ready: Callable[[], bool], what: str) -> None:
        def up() -> bool:
            if not self.alive():
                raise HarnessError(
                    f"{self.name} exited while starting; its output:\n"
                    + _tail(self.output_since_start())
                )
            return ready()

        wait_for(up, what, timeout_s=READY_TIMEOUT_S, error=HarnessError)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _worker_ready(output: str) -> bool:
    return any(" ready." in line for line in output.splitlines())


# --- the two shapes of the stack ------------------------------------------------------------


class Pieces:
    """Valkey, ``agentd serve`` and ``workers`` reflection workers, each its own process."""

    shape = "agentd serve + celery workers + embedded Valkey, started one by one"

    def __init__(self, home: Home, workers: int) -> None:
        self.home = home
        self.valkey = RedisForTests(home.path)
        self.daemon = Child(home, "agentd", [sys.executable, "-m", "agentd.cli", "serve"])
        self.workers = [
            Child(home, f"reflector{n}", worker_command(f"reflector{n}"))
            for n in range(1, workers + 1)
        ]

    def start(self) -> None:
        self.valkey.start()
        self.start_daemon()
        for worker in self.workers:
            self.start_worker(worker)

    def start_daemon(self) -> None:
        self.daemon.start()
        self.daemon.wait_ready(
            lambda: answers_status(self.home.path, timeout_s=2.0), "agentd serve to answer"
        )

    def kill_daemon(self) -> None:
        self.daemon.kill_hard()

    def start_worker(self, worker: Child) -> None:
        worker.start()
        worker.wait_ready(
            lambda: _worker_ready(worker.output_since_start()), f"{worker.name} to be ready"
        )

    def worker_running(self, since: str) -> Child:
        """The worker that last received a reflection job after ``since`` (an ISO UTC
        timestamp): Celery logs ``Task reflector.reflect[<id>] received`` as it takes one."""
        latest: tuple[str, Child] | None = None
        for worker in self.workers:
            for line in worker.output_since_start().splitlines():
                if "reflector.reflect[" in line and "] received" in line:
                    stamp = _timestamp(line)
                    if stamp >= since and (latest is None or stamp > latest[0]):
                        latest = (stamp, worker)
        if latest is None:
            raise HarnessError(f"no worker says it received a reflection job since {since}")
        return latest[1]

    def pool_children(self, worker: Child) -> list[int]:
        """The worker's prefork pool processes (its direct children)."""
        return [pid for pid in descendants(worker.pid) if (_stat(pid) or ("", 0))[1] == worker.pid]

    def casualties(self) -> list[str]:
        """Processes of the stack that are dead now: after the bench's own restarts, a
        death here is one the bench did not cause."""
        dead = [
            f"{child.name} (pid {child.pid}) exited with status {child.proc.returncode}"
            for child in [self.daemon, *self.workers]
            if child.proc is not None and child.proc.poll() is not None
        ]
        valkey = self.valkey.server.process
        if valkey is not None and valkey.poll() is not None:
            dead.append(f"valkey (pid {valkey.pid}) exited with status {valkey.returncode}")
        return dead

    def stop(self) -> None:
        for child in [self.daemon, *self.workers]:
            child.stop()
        leftovers = home_processes(self.home)
        if leftovers:
            kill_hard(leftovers)
        self.valkey.stop()


class Up:
    """``agentd up``: the daemon, the workers and the embedded Valkey under one supervisor."""

    shape = "agentd up"

    def __init__(self, home: Home, workers: int) -> None:
        self.home = home
        self.workers = workers
        self.supervisor = Child(home, "up", [sys.executable, "-m", "agentd.cli", "up"])

    def start(self) -> None:
        self.supervisor.start()

        def ready() -> bool:
            """The daemon answers and lists every worker (each registers once it is ready)."""
            try:
                status = call(self.home, "status", timeout_s=2.0)
            except HarnessError:
                return False
            return len(status["redis"]["workers"]) >= self.workers

        self.supervisor.wait_ready(ready, f"agentd up with {self.workers} workers to be ready")

    def kill_all(self) -> list[int]:
        """kill -9 of the whole stack: the supervisor, its children and theirs, and any
        process of this home that left the tree."""
        killed = kill_hard([self.supervisor.pid], also=lambda: home_processes(self.home))
        assert self.supervisor.proc is not None
        self.supervisor.proc.wait(10)
        return killed

    def valkey_pid(self) -> int | None:
        """The embedded Valkey: a child of the supervisor, or whatever serves this home's
        socket (Valkey rewrites its process title over its environment, so it cannot be
        found by ``AGENTD_HOME``)."""
        socket_path = str(self.home.valkey_socket)
        candidates = [
            pid
            for pid in descendants(self.supervisor.pid)
            if "valkey-server" in cmdline(pid) or "redis-server" in cmdline(pid)
        ]
        candidates += [pid for pid in _all_pids() if socket_path in cmdline(pid)]
        return candidates[0] if candidates else None

    def casualties(self) -> list[str]:
        """``agentd up`` itself, if it died (it restarts its own children)."""
        proc = self.supervisor.proc
        if proc is None or proc.poll() is None:
            return []
        return [f"agentd up (pid {proc.pid}) exited with status {proc.returncode}"]

    def valkey_answers(self) -> bool:
        return ping(self.home.valkey_socket)

    def stop(self) -> None:
        self.supervisor.stop()
        leftovers = home_processes(self.home)
        if leftovers:
            kill_hard(leftovers)


def _timestamp(line: str) -> str:
    """The ISO timestamp of a JSON log line (sorts as text), or an empty string."""
    start = line.find("{")
    if start < 0:
        return ""
    try:
        return str(json.loads(line[start:]).get("timestamp", ""))
    except ValueError:
        return ""
