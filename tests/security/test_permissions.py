"""The home is private: made under umask 022, everything in it is 0700/0600, another
user reads none of it, and ``agentd doctor --fix`` closes a home left open without
following a link out of it.

The stack is the whole of ``agentd up`` (Valkey, the daemon, a worker) started the way a
user with the common umask 022 starts it, after writing ``agentd.toml`` into a home they
made by hand; it chats and runs a reflection, so memory commits, git objects, payloads,
logs, sockets and Valkey's files all exist when the modes are read, and so does the
worker's own directory (its logs, outside the home).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.store.permissions import find_loose, repair, secure_home
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow


class Stack:
    def __init__(self, home: Path) -> None:
        self.home = home
        kept = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        self.env = {
            **kept,
            "AGENTD_HOME": str(home),
            "AGENTD_WORKER_DIR": str(home.parent / "worker"),
            "AGENTD_WORKERS": "1",
            "AGENTD_REFLECTION_WAIT_S": "30",
            "AGENTD_BLOCK_REMOTE_MODELS": "1",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def agentctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentd.client", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=ceiling(90),
        )

    def start(self) -> None:
        output = self.home.parent / "up.out"
        with open(output, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentd.cli", "up"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                umask=0o022,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(output.read_text(errors="replace"))
            return (
                b"reflector_ready" in output.read_bytes() and not self.agentctl("status").returncode
            )

        wait_for(ready, "agentd up to be ready", timeout_s=90, poll_s=0.2, error=RuntimeError)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(ceiling(60))


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """A stack that has chatted and reflected on a home first made by hand under umask
    022. The home's parent is open to all, so only the home's own modes keep others out."""
    parent = Path(tempfile.mkdtemp(prefix="agentd-p-", dir="/tmp"))
    parent.chmod(0o755)
    home = parent / "home"
    old_umask = os.umask(0o022)
    try:
        home.mkdir()
        (home / "agentd.toml").write_text('api_key = "sk-0123456789abcdef"\n')
    finally:
        os.umask(old_umask)
    running = Stack(home)
    try:
        running.start()
        sleeptime = running.agentctl("sleeptime", "--trigger", "step-count", "--steps", "1")
        assert sleeptime.returncode == 0, sleeptime.stderr
        chat = running.agentctl("chat", "-p", "I prefer tabs for indentation")
        assert chat.returncode == 0 and "☾ reflection" in chat.stdout, chat.stdout + chat.stderr
        yield running
    finally:
        running.stop()
        shutil.rmtree(parent, ignore_errors=True)


def _one(home: Path, pattern: str) -> Path:
    found = sorted(path for path in home.glob(pattern) if path.is_file())
    assert found, f"nothing matches {pattern} under {home}"
    return found[0]


def _open_to_others(home: Path) -> list[str]:
    """``path mode`` of everything under ``home`` (itself too) with a group or other bit."""
    found = []
    for root, dirs, files in os.walk(home):
        for path in [Path(root), *(Path(root, name) for name in dirs + files)]:
            info = path.lstat()
            if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
                found.append(f"{path.relative_to(home.parent)} {stat.S_IMODE(info.st_mode):04o}")
    return sorted(set(found))


def test_a_home_made_under_umask_022_holds_only_directories_0700_and_files_0600(
    stack: Stack,
) -> None:
    home = stack.home
    for made in (
        "agents/*/memory/system/human.md",
        "agents/*/memory/.git/objects/??/*",
        "agents/*/conversations/*/messages.jsonl",
        "agents/*/reflections/log.jsonl",
        "logs/agentd.log",
        "logs/valkey.log",
        "valkey/*/*",
    ):
        _one(home, made)
    assert (home / "run" / "agentd.sock").is_socket()
    assert (home / "run" / "valkey.sock").is_socket()
    worker_dir = home.parent / "worker"  # the worker's own: it never writes the home
    _one(worker_dir, "logs/reflector*.log")

    assert _open_to_others(home) == []
    assert _open_to_others(worker_dir) == []

    memory = _one(home, "agents/*/memory/system/human.md").parents[1]
    shared = subprocess.run(
        ["git", "config", "--file", str(memory / ".git" / "config"), "core.sharedRepository"],
        capture_output=True,
    )
    assert shared.returncode == 1  # unset: git keeps to the umask


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="reading as another user needs root and setpriv (util-linux)",
)
def test_another_user_reads_no_memory_history_log_or_settings(stack: Stack) -> None:
    nobody = pwd.getpwnam("nobody")

    def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "setpriv",
                f"--reuid={nobody.pw_uid}",
                f"--regid={nobody.pw_gid}",
                "--clear-groups",
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=ceiling(10),
        )

    home = stack.home
    assert as_nobody("ls", str(home.parent)).returncode == 0  # the way to the home is open
    for secret in (
        _one(home, "agents/*/memory/system/human.md"),
        _one(home, "agents/*/memory/.git/objects/??/*"),
        home / "logs" / "agentd.log",
        home / "agentd.toml",
    ):
        read = as_nobody("cat", str(secret))
        assert read.returncode != 0 and "Permission denied" in read.stderr, secret


def test_secure_home_closes_the_home_and_its_settings_but_no_link_or_shared_directory(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    outside = tmp_path / "dotfiles.toml"
    outside.write_text("")
    outside.chmod(0o644)
    (home / "agentd.toml").symlink_to(outside)
    shared_dir = tmp_path / "shared"
    shared_dir.mkdir()
    shared_dir.chmod(0o1777)
    kept_elsewhere = tmp_path / "data"
    kept_elsewhere.mkdir()
    kept_elsewhere.chmod(0o755)
    (tmp_path / "linked-home").symlink_to(kept_elsewhere)

    for each in (home, shared_dir, tmp_path / "linked-home"):
        secure_home(each)

    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert stat.S_IMODE(shared_dir.stat().st_mode) == 0o1777
    assert stat.S_IMODE(kept_elsewhere.stat().st_mode) == 0o700


def test_repair_leaves_a_file_that_has_a_hard_link_outside_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True, mode=0o700)
    home.chmod(0o700)
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0\n")
    outside.chmod(0o644)
    os.link(outside, home / "workspace" / "linked")
    inside_twice = home / "workspace" / "a"
    inside_twice.write_text("")
    inside_twice.chmod(0o644)
    os.link(inside_twice, home / "workspace" / "b")

    result = repair(home)

    assert result.fixed == 1  # one file with two names, both in the home
    assert [(loose.path.name, why) for loose, why in result.left] == [
        ("linked", "it has a hard link outside the home")
    ]
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert stat.S_IMODE(inside_twice.stat().st_mode) == 0o600
    assert [loose.path.name for loose in find_loose(home)] == ["linked"]
