"""One damaged file harms one thing, and says so: the daemon serves everything else, the
damaged part is refused with its path and what to do, and ``agentd doctor`` names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling, wait_for


def _doctor() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )


def _recall_logged(home: Path, event: str) -> list[dict[str, Any]]:
    """The ``event`` lines of the recall process's own log file, once there are some."""
    path = home / "logs" / "recall.log"

    def logged() -> list[dict[str, Any]]:
        lines = path.read_text().splitlines() if path.exists() else []
        return [e for e in map(json.loads, lines) if e["event"] == event]

    found: list[dict[str, Any]] = wait_for(logged, f"the recall process to log {event}")
    return found


def _agent_dir(home: Path, agent_id: str) -> Path:
    return home / "agents" / agent_id


@pytest.mark.slow
def test_an_agent_without_its_memory_repo_is_refused_while_the_others_serve(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    assert run_agentctl("agents", "create", "keeper").returncode == 0
    broken = json.loads(run_agentctl("agents", "create", "broken", "--json").stdout)
    daemon.stop()
    memory = Path(broken["memory_dir"])
    shutil.rmtree(memory / ".git")

    daemon.start()
    kept = run_agentctl("chat", "--agent", "keeper", "-p", "still there?")
    refused = run_agentctl("chat", "--agent", "broken", "-p", "and you?")
    doctor = _doctor()
    daemon.stop()  # raises what the daemon raised, if it did not serve on

    assert kept.returncode == 0, kept.stderr
    assert "still there?" in kept.stdout
    assert refused.returncode == 1
    assert refused.stderr.startswith("memory_damaged: ")
    assert str(memory) in refused.stderr
    assert "backup" in refused.stderr and f"cd {memory} && git init" in refused.stderr
    assert doctor.returncode == 1
    [finding] = [line for line in doctor.stdout.splitlines() if line.startswith("✗ memory")]
    assert broken["id"] in finding and str(memory) in finding


def test_a_memory_repo_restored_as_told_is_used_without_a_restart(daemon: DaemonRunner) -> None:
    daemon.start()
    memory = Path(daemon.result("agent.create", {"name": "mended"})["memory_dir"])
    shutil.rmtree(memory / ".git")
    refused = daemon.call("chat", {"agent": "mended", "text": "hello?"})[-1]["error"]

    fix = refused["message"].split("start a new history: ", 1)[1].split(". ")[0]
    subprocess.run(fix, shell=True, check=True, capture_output=True)

    assert refused["code"] == "memory_damaged"
    answer = daemon.result("chat", {"agent": "mended", "text": "hello again"})
    assert answer["stop_reason"] == "end_turn"


@pytest.mark.slow
def test_a_garbled_conversation_record_hides_no_message_from_recall(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "the staging database listens on port 5433"})
    other = daemon.result("conversation.create")["id"]
    daemon.result("chat", {"text": "the deploy key is in vault", "conversation": other})
    agent_id = daemon.result("agent.show")["id"]
    daemon.stop()
    garbled = agentd_home / "agents" / agent_id / "conversations" / other / "conversation.json"
    garbled.write_text('{"id": "conv-')

    daemon.start()
    port = daemon.result("recall.search", {"query": "staging database port"})["hits"]
    key = daemon.result("recall.search", {"query": "deploy key vault"})["hits"]
    listed = daemon.result("conversation.list")["conversations"]
    doctor = _doctor()

    assert "5433" in port[0]["text"]
    assert key[0]["text"] == "the deploy key is in vault"
    assert [c["id"] for c in listed] == [daemon.result("agent.show")["default_conversation_id"]]
    reported = _recall_logged(agentd_home, "conversation_record_corrupt")
    assert reported and reported[0]["path"] == str(garbled)
    assert "restore it from a backup" in reported[0]["error"]
    assert doctor.returncode == 1
    assert any(
        line.startswith("✗ state files") and str(garbled) in line
        for line in doctor.stdout.splitlines()
    )


def test_a_deleted_agent_record_is_refused_not_replaced_and_restored_as_told(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    first = daemon.result("chat", {"text": "remember me"})
    agent_id = daemon.result("agent.show")["id"]
    record = _agent_dir(agentd_home, agent_id) / "agent.json"
    record.unlink()

    refused = daemon.call("chat", {"text": "who are you?"})[-1]["error"]
    listed = daemon.result("agent.list")["agents"]
    doctor = _doctor()

    assert refused["code"] == "agent_record_missing"
    assert str(_agent_dir(agentd_home, agent_id)) in refused["message"]
    assert "backup" in refused["message"]
    assert [p.name for p in (agentd_home / "agents").iterdir()] == [agent_id]
    assert listed == []
    assert doctor.returncode == 1
    assert any(
        line.startswith("✗ state files") and agent_id in line for line in doctor.stdout.splitlines()
    )

    restore = refused["message"].rsplit(": ", 1)[1]
    assert restore.startswith("mv ")
    subprocess.run(restore, shell=True, check=True)
    after = daemon.result("chat", {"text": "back?"})

    assert daemon.result("agent.show")["name"] == "default"
    assert after["conversation_id"] == first["conversation_id"]
    assert json.loads(record.read_text())["id"] == agent_id
