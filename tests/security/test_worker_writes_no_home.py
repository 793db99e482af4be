"""Memory is written only by the daemon: a worker on the daemon's own host, with the home
right there and ``AGENTD_HOME`` naming it, runs the walkthrough's reflection without once
opening a file under the home for writing (or making, moving, removing or changing one).

Every system call of the worker's process tree that names a file — its Celery processes,
their pool children, git, bubblewrap and the sub-agent's shell — is traced with strace;
a call that would change something under the home fails the test, whether it succeeded
or not."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from shared.models.reflection import ReflectionOutcome
from tests.support.daemon import DaemonRunner
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests, WorkerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("strace") is None, reason="no strace here"),
]

SAID = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]
WRITES = re.compile(r"O_(WRONLY|RDWR|CREAT|TRUNC|APPEND)")
CHANGING = frozenset(
    {
        "creat", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
        "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmodat", "chown",
        "lchown", "fchownat", "truncate", "utime", "utimes", "utimensat", "futimesat",
        "mknod", "mknodat", "setxattr", "lsetxattr", "removexattr", "lremovexattr", "chdir",
    }
)  # fmt: skip
"""Calls that change what they name (``chdir`` too: a relative write after it would land
in the home unseen)."""
CALL = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+([a-z0-9_]+)\((.*)$")


class TracedWorker(WorkerProcess):
    """A worker process run under ``strace -f``: every file-naming call of its tree."""

    def __init__(self, home: Path, trace: Path, **env: str) -> None:
        super().__init__(home, "traced", **env)
        strace = ["strace", "-f", "-qq", "-s", "4096", "-y", "-e", "trace=%file", "-o"]
        self.command = [*strace, str(trace), *self.command]


def writes_under(trace: Path, home: Path) -> list[str]:
    """The traced calls that would change a file under ``home``."""
    under = re.compile('["<]' + re.escape(str(home.resolve())) + '[">/]')
    found = []
    for line in trace.read_text(errors="replace").splitlines():
        match = CALL.match(line)
        if match is None:
            continue
        name, args = match[2], match[3]
        changing = name in CHANGING or (name.startswith("open") and WRITES.search(args))
        if changing and under.search(args):  # the home itself or below it, not home-tmp
            found.append(line)
    return found


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    paths = list(home.glob("agents/*/reflections/log.jsonl"))
    lines = paths[0].read_text().splitlines() if paths else []
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def test_no_worker_process_writes_anything_under_the_home(
    daemon: DaemonRunner, agentd_home: Path, tmp_path: Path
) -> None:
    redis = RedisForTests(agentd_home).start()
    trace = tmp_path / "worker.strace"
    worker = TracedWorker(agentd_home, trace)
    try:
        worker.start(timeout_s=120)
        daemon.start(reflection_wait_s=0)
        daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
        for text in SAID:
            daemon.result("chat", {"text": text})
        wait_for(
            lambda: any(o.status == "merged" for o in _outcomes(agentd_home)),
            "the reflection to merge",
            timeout_s=120,
        )
    finally:
        worker.stop()
        redis.stop()

    human = daemon.result("memory.show", {"path": "system/human.md"})["text"]
    assert "- 我更喜欢用 tabs 缩进" in human
    traced = trace.read_text(errors="replace")
    worker_dir = str(Path(worker.env["AGENTD_WORKER_DIR"]).resolve())
    assert f'mkdir("{worker_dir}/jobs/' in traced or f'"{worker_dir}/jobs/' in traced, (
        "the trace does not show the job's own scratch: nothing was traced"
    )
    assert writes_under(trace, agentd_home) == []
