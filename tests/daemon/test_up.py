"""``agentd up``: the whole stack from one command, driven with agentctl like a user does.

Its output goes to a file here (not a terminal: JSON lines), except where a test reads it
through a pseudo-terminal as a person would.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.coordination.embedded import AOF_DIRNAME, ping
from shared.store.layout import Layout
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow

CELERY_BANNER = re.compile(r"-------------- |\[tasks\]|\[queues\]")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Up:
    def __init__(self, home: Path, output: str = "up.out") -> None:
        self.home = home
        self.env = {**os.environ, "AGENTD_WORKERS": "1", "AGENTD_REFLECTION_WAIT_S": "30"}
        self.output = home / output
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Up:
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentd.cli", "up"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(self.output.read_text(errors="replace"))
            return b"ready" in self.output.read_bytes() and not run_agentctl("status").returncode

        wait_for(ready, "agentd up to be ready", timeout_s=60, poll_s=0.2, error=RuntimeError)
        return self

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(ceiling(60))

    def events(self) -> list[dict]:
        """Every line of the output so far (each one JSON); a torn last line is left out."""
        text = self.output.read_text()
        return [json.loads(line) for line in text.splitlines(keepends=True) if line[-1] == "\n"]

    def said(self, process: str, event: str) -> list[dict]:
        return [e for e in self.events() if e["process"] == process and e["event"] == event]


@pytest.fixture
def up(agentd_home: Path) -> Iterator[Up]:
    stack = Up(agentd_home).start()
    yield stack
    stack.stop()


def _children_of(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()]


def _stack_of(pid: int) -> list[int]:
    """Every descendant of ``pid``: Valkey, the daemon, the workers and their pool processes."""
    children = _children_of(pid)
    return children + [below for child in children for below in _stack_of(child)]


def _living(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie waiting to be reaped has stopped)."""
    alive = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            alive.append(pid)
    return alive


def test_the_seed_walkthrough_through_agentctl_then_a_clean_stop(up: Up, agentd_home: Path) -> None:
    assert run_agentctl(
        "reflection-settings", "--trigger", "step-count", "--steps", "3"
    ).stdout == ('{"trigger":"step-count","stepCount":3,"merge":"auto"}\n')
    assert (
        run_agentctl("chat", "-p", "帮我看下这个报错").stdout
        == "（mock）我听到了：帮我看下这个报错\n"
    )
    run_agentctl("chat", "-p", "我更喜欢用 tabs 缩进")
    third = run_agentctl("chat", "-p", "今天我们决定以后一律用 pnpm").stdout.splitlines()
    assert third[0] == "（mock）我听到了：今天我们决定以后一律用 pnpm"
    assert third[1].startswith("  ☾ reflection ")
    assert third[1].endswith(": merged — Merged 1 reflection commit(s).")

    log = run_agentctl("memory", "log").stdout.splitlines()
    assert "(reflection): " in log[0] and log[0].endswith("🔮")
    assert log[-1].endswith("chore: initialize local memory")
    human = run_agentctl("memory", "show", "system/human.md").stdout
    assert "- 我更喜欢用 tabs 缩进" in human and "我们决定以后一律用 pnpm" in human
    assert "报错" not in human

    asked = run_agentctl("chat", "-p", "你知道我什么？").stdout.splitlines()
    assert asked[0] == "  ↻ memory changed — injected <memory_update> reminder"
    assert asked[1] == "我记得关于你的这些："
    assert asked[2] == "- 我更喜欢用 tabs 缩进"

    manual = run_agentctl("reflect", "--wait", "--timeout", "60")
    assert manual.returncode == 0 and "no_changes" in manual.stdout
    assert "merged" in run_agentctl("reflections").stdout

    assert up.proc is not None
    children = _children_of(up.proc.pid)
    assert len(children) == 3  # valkey, agentd, one reflector
    assert up.stop() == 0
    wait_for(
        lambda: not [pid for pid in children if Path(f"/proc/{pid}").exists()],
        "the children of agentd up to be gone",
    )
    assert not (agentd_home / "run" / "agentd.sock").exists()
    assert not (agentd_home / "run" / "valkey.sock").exists()


def _already_running(home: Path) -> str:
    return (
        f"agentd is already running for {home}; stop it first with `agentctl shutdown` "
        "(or Ctrl-C in its terminal)\n"
    )


def _another_up(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(30),
    )


def test_up_on_a_home_a_standalone_serve_serves_refuses_like_a_second_up_starting_nothing(
    agentd_home: Path,
) -> None:
    serve = AgentdProcess().start()
    try:
        refused = _another_up(dict(os.environ))
        assert (refused.returncode, refused.stderr) == (1, _already_running(agentd_home))
        assert refused.stdout == ""
        assert not (agentd_home / "valkey").exists()
        assert not (agentd_home / "run" / "valkey.sock").exists()
        assert run_agentctl("status").returncode == 0  # the serve it found is untouched
    finally:
        serve.stop()


def test_a_kill_9_of_up_takes_every_child_with_it_and_a_new_up_starts(
    up: Up, agentd_home: Path
) -> None:
    assert up.proc is not None
    stack = _stack_of(up.proc.pid)
    assert len(stack) >= 4  # Valkey, the daemon, a worker and its pool process

    up.proc.kill()
    up.proc.wait(ceiling(10))

    wait_for(lambda: not _living(stack), "the children of the killed agentd up to die")
    again = Up(agentd_home, output="up-again.out").start()
    assert again.stop() == 0


def test_a_stack_reports_itself_refuses_a_second_up_and_shutdown_stops_all_it_piped(
    up: Up, agentd_home: Path
) -> None:
    """One stack's life on a pipe: ``status --json`` describes it, a second ``up`` on the
    same home is refused, ``agentctl shutdown`` stops every process of it, and what it
    printed was JSON lines naming their process, without Celery's banner."""
    run_agentctl("chat", "-p", "hi")

    def with_a_worker() -> dict[str, Any] | None:
        status: dict[str, Any] = json.loads(run_agentctl("status", "--json").stdout)
        return status if status["redis"]["workers"] else None

    status = wait_for(with_a_worker, "status to list the worker", poll_s=0.5)
    assert status["ready"] is True and status["uptime_s"] >= 0
    assert status["redis"]["embedded"] is True and status["redis"]["reachable"] is True
    assert status["redis"]["queue_depth"] == 0
    assert [w["name"].split("@")[0] for w in status["redis"]["workers"]] == ["reflector-1"]
    (agent,) = status["agents"]
    assert agent["reflection"] == {"trigger": "compaction-event", "stepCount": 25, "merge": "auto"}
    assert agent["steps_since_last_reflection"] == 1
    assert agent["last_reflection"] is None and agent["backoff_until"] is None

    second = _another_up(up.env)
    assert (second.returncode, second.stderr) == (1, _already_running(agentd_home))

    assert up.proc is not None
    stack = _stack_of(up.proc.pid)
    assert run_agentctl("shutdown").returncode == 0
    assert up.proc.wait(ceiling(60)) == 0
    assert not _living(stack)

    output = up.output.read_text()
    events = [json.loads(line) for line in output.splitlines()]  # every line is JSON
    assert {e["process"] for e in events} == {"up", "valkey", "agentd", "reflector-1"}
    assert up.said("agentd", "agentd_listening") and up.said("reflector-1", "reflector_ready")
    assert up.said("valkey", "valkey_started") and up.said("valkey", "valkey_stopped")
    assert not CELERY_BANNER.search(output) and "SecurityWarning" not in output
    worker_logs = Path(up.env["AGENTD_WORKER_DIR"]) / "logs"  # the worker writes no home
    logged = [json.loads(line) for line in (worker_logs / "reflector.log").open()]
    (banner,) = [r for r in logged if r["event"] == "celery_banner"]
    assert banner["level"] == "debug" and "reflector-1@" in banner["banner"]
    if os.geteuid() == 0:  # Celery warns a root worker; the log keeps it, quietly
        (warning,) = [r for r in logged if "SecurityWarning" in r["event"]]
        assert warning["level"] == "debug"


def _read_until(fd: int, seen: bytearray, done: Callable[[str], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + ceiling(timeout_s)
    while not done(ANSI.sub("", seen.decode(errors="replace"))):
        assert time.monotonic() < deadline, seen.decode(errors="replace")
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # every process holding the terminal has gone
                return
            if not chunk:
                return
            seen += chunk


def test_on_a_terminal_up_prints_readable_lines_prefixed_by_their_process(
    agentd_home: Path,
) -> None:
    env = {**os.environ, "AGENTD_WORKERS": "1"}
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.cli", "up"],
        env=env,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    seen = bytearray()
    started = ("agentd_listening", "reflector_ready")
    try:
        _read_until(controller, seen, lambda text: all(e in text for e in started), 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(ceiling(60)) == 0
        stopped = re.compile(r"valkey +\| stopped")
        _read_until(controller, seen, lambda text: bool(stopped.search(text)), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)

    lines = ANSI.sub("", seen.decode()).replace("\r\n", "\n").splitlines()
    assert any(re.match(r"up +\| \S+ \[info +\] embedded_redis_started ", x) for x in lines)
    assert any(re.match(r"valkey +\| embedded Valkey on ", x) for x in lines)
    assert any(re.match(r"agentd +\| \S+ \[info +\] agentd_listening ", x) for x in lines)
    assert any(re.match(r"reflector-1 \| \S+ \[info +\] reflector_ready ", x) for x in lines)
    assert all(re.match(r"(up|valkey|agentd|reflector-1) +\| ", line) for line in lines if line)
    assert not [line for line in lines if "| {" in line]  # no JSON
    text = "\n".join(lines)
    assert not CELERY_BANNER.search(text) and "SecurityWarning" not in text


def test_a_killed_worker_is_reported_and_restarted(up: Up) -> None:
    assert up.proc is not None
    worker = next(
        pid
        for pid in _children_of(up.proc.pid)
        if b"celery" in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: bool(up.said("reflector-1", "child_exited")), "the death to be reported")

    def restarted() -> bool:
        assert up.proc is not None
        workers = [
            p
            for p in _children_of(up.proc.pid)
            if b"celery" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        return bool(workers) and workers != [worker]

    wait_for(restarted, "the worker to be restarted", poll_s=0.2)
    assert run_agentctl("chat", "-p", "still here").returncode == 0


def test_a_valkey_killed_with_9_comes_back_with_its_data_status_says_so_and_reflection_goes_on(
    up: Up, agentd_home: Path
) -> None:
    assert up.proc is not None
    socket_path = agentd_home / "run" / "valkey.sock"
    redis.Redis(unix_socket_path=str(socket_path)).set("agentd:test:kept", "yes")
    aof = Layout(agentd_home).valkey_dir / AOF_DIRNAME
    wait_for(  # written to the file: a kill -9 keeps it (the kernel holds it)
        lambda: any(b"agentd:test:kept" in path.read_bytes() for path in aof.glob("*.aof")),
        "Valkey to append the write to its file",
    )
    (valkey,) = (
        pid
        for pid in _children_of(up.proc.pid)
        if b"unixsocket:" in Path(f"/proc/{pid}/cmdline").read_bytes()
    )

    os.kill(up.proc.pid, signal.SIGSTOP)  # the supervisor holds still: Valkey stays down
    try:
        os.kill(valkey, signal.SIGKILL)
        wait_for(lambda: not ping(socket_path), "Valkey to die")
        down = run_agentctl("status").stdout
        assert "redis    embedded, NOT reachable: `agentd up` is restarting the embedded" in down
        assert json.loads(run_agentctl("status", "--json").stdout)["redis"]["state"] == "restarting"
    finally:
        os.kill(up.proc.pid, signal.SIGCONT)

    wait_for(
        lambda: [e["status"] for e in up.said("valkey", "child_exited")] == [-9],
        "the supervisor to report the death",
    )
    wait_for(
        lambda: "embedded, reachable" in run_agentctl("status").stdout,
        "Valkey to be back",
        poll_s=0.2,
    )
    assert not Path(f"/proc/{valkey}").exists(), "the dead Valkey was left <defunct>"
    assert redis.Redis(unix_socket_path=str(socket_path)).get("agentd:test:kept") == b"yes"
    manual = run_agentctl("reflect", "--wait", "--timeout", "60")
    assert manual.returncode == 0, manual.stdout + manual.stderr
