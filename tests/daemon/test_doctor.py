"""agentd doctor: a broken setup is named, with what to do about it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _doctor(**env: str) -> subprocess.CompletedProcess[str]:
    without_keys = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor"],
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
    assert lines[-1] == "5 ok, 3 to fix"
