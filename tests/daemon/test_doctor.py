"""agentd doctor: a broken setup is named, with what to do about it."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import DaemonRunner


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    without_keys = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor", *args],
        env={**without_keys, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_healthy_offline_setup_is_all_good() -> None:
    result = _doctor()
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "all good"
    assert "✓ model: mock" in result.stdout


def test_an_unreachable_redis_a_missing_key_and_a_corrupt_record_are_named(
    agentd_home: Path,
) -> None:
    broken = agentd_home / "agents" / "agent-x"
    broken.mkdir(parents=True)
    (broken / "agent.json").write_text("{not json")
    env = {"AGENTD_REDIS_URL": "redis://127.0.0.1:1/0", "AGENTD_MODEL": "openai/gpt-4o"}
    result = _doctor(**env)
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert any(line.startswith("✗ redis: redis://127.0.0.1:1/0 is not reachable") for line in lines)
    assert any(line.startswith("✗ model: openai/gpt-4o: missing OPENAI_API_KEY") for line in lines)
    assert any(
        line.startswith("✗ state files: damaged: ") and "agent.json" in line for line in lines
    )
    assert "    → export OPENAI_API_KEY=" in result.stdout
    assert any(line.startswith("✗ permissions: ") and "agents (0755)" in line for line in lines)
    assert lines[-1] == "6 ok, 4 to fix"


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
    assert fixed.returncode == 0, fixed.stdout
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
