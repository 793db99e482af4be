"""agentd doctor: a broken setup is named, with what to do about it; while the daemon runs,
its settings are the ones checked; and doctor leaves the home as it found it."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentd import cli
from shared.providers.credentials import ProviderKeys
from shared.providers.factory import ProviderFactory
from shared.settings import Settings
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

DAEMON_DOWN = "✗ daemon: not running (start it with agentd up)"
KEY_CANARY = "sk-doctor0canary0key0123456789"
REDIS_PASSWORD = "hunter2canary"


def _env(**env: str) -> dict[str, str]:
    without_keys = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return {**without_keys, **env}


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor", *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )


def _doctor_on_a_terminal(**env: str) -> tuple[int, str]:
    """Doctor with stdout and stderr on a pseudo-terminal: its exit status, and every byte
    it wrote there (spinner frames included)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.cli", "doctor"],
        env=_env(**env),
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    written = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # doctor exited and the terminal is closed
            break
        if not chunk:
            break
        written += chunk
    os.close(controller)
    return proc.wait(ceiling(60)), written.decode()


def _snapshot(home: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every path under ``home`` with its mode, size, modification time and content."""
    found = {}
    for path in [home, *home.rglob("*")]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path)] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return found


def test_with_the_stack_down_doctor_says_so_exits_1_and_creates_no_home(tmp_path: Path) -> None:
    absent = tmp_path / "not-yet" / "home"
    result = _doctor(AGENTD_HOME=str(absent))
    lines = result.stdout.splitlines()
    assert DAEMON_DOWN in lines
    assert [line for line in lines if line.startswith("✗")] == [DAEMON_DOWN]
    assert "✓ model: mock (offline, deterministic)" in lines
    assert (result.returncode, lines[-1]) == (1, f"{len(lines) - 2} ok, 1 to fix")
    assert not (tmp_path / "not-yet").exists()


def test_doctor_leaves_a_used_home_byte_for_byte_as_it_was(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "remember that I prefer tabs"})
    daemon.stop()
    before = _snapshot(agentd_home)

    result = _doctor()

    assert DAEMON_DOWN in result.stdout and "✓ memory repos: 1 readable" in result.stdout
    assert _snapshot(agentd_home) == before


class _KeyedProviders(ProviderFactory):
    """The daemon's providers, holding the key its environment had at start."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, ProviderKeys({"OPENAI_API_KEY": KEY_CANARY}))


def test_core_memory_lost_by_a_merge_or_by_hand_is_named_and_held_reflections_noted(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    memory = Path(daemon.result("agent.create", {"name": "ada"})["memory_dir"])
    daemon.stop()
    assert "✓ core memory: every agent has system/persona.md and system/human.md" in (
        _doctor().stdout.splitlines()
    )
    held = Layout(agentd_home).reflection_files(next(agentd_home.glob("agents/*")).name)
    held.proposals.mkdir(parents=True)
    (held.proposals / "20270101000000-abcdef12.json").write_text(
        json.dumps(
            {
                "id": "20270101000000-abcdef12",
                "agent_id": "a",
                "request_id": "rq-1",
                "created_at": "2027-01-01T00:00:00Z",
                "base": "a" * 40,
                "head": "b" * 40,
                "destruction": {
                    "deleted": ["system/human.md"],
                    "emptied": [],
                    "lines_before": 11,
                    "added": 0,
                    "removed": 6,
                    "hold_share": 0.3,
                    "files_changed": 1,
                },
            }
        )
    )
    subprocess.run(["git", "-C", str(memory), "rm", "-q", "system/human.md"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(memory),
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@x",
            "commit",
            "-qm",
            "x",
        ],
        check=True,
    )

    lines = _doctor().stdout.splitlines()

    assert "✗ core memory: missing, so the agent's prompt lacks them: ada: system/human.md" in lines
    assert any("`agentctl memory revert COMMIT --agent ada`" in line for line in lines)
    subprocess.run(
        ["git", "-C", str(memory), "revert", "--no-edit", "HEAD"], check=True, capture_output=True
    )
    assert (
        "✓ core memory: every agent has system/persona.md and system/human.md; 1 reflection(s) "
        "held for ada (`agentctl memory proposals --agent ada`)"
    ) in _doctor().stdout.splitlines()


def test_doctor_checks_the_running_daemons_settings_not_its_own_and_asks_its_api(
    daemon: DaemonRunner,
) -> None:
    with FakeOpenAIServer() as provider:
        daemon.start(
            providers=_KeyedProviders,
            model="openai/gpt-4o",
            api_base=provider.url,
            redis_url=f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0",
        )
        config = daemon.result("config.show", {})
        status, written = _doctor_on_a_terminal()  # this shell: the mock model, no key

    assert config["model"] == "openai/gpt-4o" and config["provider_keys"] == ["OPENAI_API_KEY"]
    assert config["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert "⠋ model: importing litellm" in written  # a spinner while litellm loads
    lines = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in written.splitlines()]
    assert any(line.startswith("✓ daemon: answering on ") for line in lines)
    assert "✗ redis: the daemon cannot reach redis://:***@127.0.0.1:1/0" in lines
    assert "✓ model: openai/gpt-4o (the daemon's; credentials present)" in lines
    assert f"✓ api base: {provider.url} answers (HTTP 501)" in lines
    assert status == 1  # Redis
    for secret in (KEY_CANARY, REDIS_PASSWORD):
        assert secret not in written and secret not in str(config)


@pytest.mark.sdk  # imports litellm
@pytest.mark.usefixtures("no_provider_keys")
def test_an_unreachable_redis_a_missing_key_and_a_corrupt_record_are_named(
    agentd_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Doctor run in this worker (litellm is loaded there already), as ``agentd doctor``
    runs off a terminal: its settings from the environment, which holds no key."""
    broken = agentd_home / "agents" / "agent-x"
    broken.mkdir(parents=True)
    (agentd_home / "agents").chmod(0o755)  # as made by hand under the login umask
    (broken / "agent.json").write_text("{not json")
    monkeypatch.setenv("AGENTD_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("AGENTD_MODEL", "openai/gpt-4o")
    monkeypatch.setenv("AGENTD_API_BASE", "http://127.0.0.1:1/v1")
    returncode = cli.main(["doctor"])
    result = capsys.readouterr()
    lines = result.out.splitlines()
    assert returncode == 1
    assert any(line.startswith("✗ redis: redis://127.0.0.1:1/0 is not reachable") for line in lines)
    assert any(line.startswith("✗ model: openai/gpt-4o: missing OPENAI_API_KEY") for line in lines)
    assert "✗ api base: http://127.0.0.1:1/v1 refuses connections" in lines
    assert "… model: importing litellm" in result.err  # not a terminal: one line says so
    assert any(
        line.startswith("✗ state files: damaged: ") and "agent.json" in line for line in lines
    )
    assert "    → export OPENAI_API_KEY=" in result.out
    assert any(line.startswith("✗ permissions: ") and "agents (0755)" in line for line in lines)
    assert DAEMON_DOWN in lines
    assert lines[-1] == "11 ok, 6 to fix"


def test_a_home_an_older_agentd_left_open_is_reported_then_closed_by_fix(
    daemon: DaemonRunner, agentd_home: Path, tmp_path: Path
) -> None:
    daemon.start()  # in the test process: umask 022, as agentd ran before it set its own
    daemon.result("chat", {"text": "remember that I prefer tabs"})
    daemon.stop()
    agentd_home.chmod(0o755)
    outside = tmp_path / "outside.txt"
    outside.write_text("not agentd's")
    outside.chmod(0o644)
    (next(agentd_home.glob("agents/*/memory")) / "link").symlink_to(outside)

    report = _doctor()
    finding = next(line for line in report.stdout.splitlines() if "permissions" in line)
    assert finding.startswith("✗ permissions: ") and f"{agentd_home} (0755)" in finding
    assert "    → run `agentd doctor --fix`" in report.stdout
    loose = int(re.search(r"(\d+) path\(s\)", finding).group(1))  # type: ignore[union-attr]
    assert loose > 10  # memory files, git objects, transcripts, the home …

    fixed = _doctor("--fix")
    assert fixed.stdout.startswith(f"fixed permissions of {loose} path(s) under {agentd_home}\n")
    assert "✓ permissions: private" in fixed.stdout
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
