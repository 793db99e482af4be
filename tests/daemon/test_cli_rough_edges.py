"""agentctl where a new user found rough edges: a usage error that exited 1, ``--json``
flags that were ignored, epoch floats among ISO times, a whole system prompt printed on
``agents create``, a window too small to hold one message, silence for an agent without
reflections. The real agentctl against the daemon in this worker (tests/daemon/conftest.py),
a temporary home."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from reflector.startup import Heartbeat
from shared.coordination.broker import locate
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests

pytestmark = pytest.mark.slow

PERSONA = "I am Ada. " + "I keep every detail of the user's projects in mind. " * 40


def ok(*args: str) -> str:
    result = run_agentctl(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("query", ["", "   "])
def test_a_search_for_nothing_is_a_usage_error(serving: DaemonRunner, query: str) -> None:
    result = run_agentctl("search", query)
    assert result.returncode == 2, result.stderr
    assert (
        "search needs words to find" in result.stderr and "usage: agentctl search" in result.stderr
    )


def test_memory_log_and_path_answer_json_when_asked(serving: DaemonRunner) -> None:
    commits = json.loads(ok("memory", "log", "--json"))
    assert [c["subject"] for c in commits] == ["chore: initialize local memory"]
    assert datetime.fromisoformat(commits[0]["date"]).tzinfo is not None
    path = json.loads(ok("memory", "path", "--json"))["path"]
    assert Path(path, "system", "human.md").is_file()
    assert ok("memory", "path") == path + "\n"  # the readable form is unchanged


def test_agents_create_and_update_print_a_summary_and_the_record_with_json(
    serving: DaemonRunner,
) -> None:
    created = ok("agents", "create", "ada", "--persona", PERSONA)
    assert created.splitlines()[0] == "created agent ada"
    assert "model          mock" in created
    assert "I keep every detail" not in created and "system_prompt" not in created
    record = json.loads(ok("agents", "update", "ada", "--model", "openai/gpt-4o", "--json"))
    assert (record["name"], record["model"]) == ("ada", "openai/gpt-4o")
    updated = ok("agents", "update", "ada", "--context-window", "64000")
    assert updated.splitlines()[0] == "updated agent ada"
    assert "context window 64,000 tokens" in updated
    assert json.loads(ok("agents", "create", "bob", "--json"))["name"] == "bob"


def test_a_window_too_small_for_any_message_is_refused_when_set(serving: DaemonRunner) -> None:
    ok("agents", "create", "ada")
    for args in (("update", "ada"), ("create", "tiny")):
        result = run_agentctl("agents", *args, "--context-window", "10")
        assert result.returncode == 1
        assert "context_window" in result.stderr and "1000" in result.stderr, result.stderr
    assert "tiny" not in ok("agents", "list")
    assert "as known for the model" in ok("agents", "show", "ada")


def test_a_window_memory_outgrew_names_the_agents_own_setting(serving: DaemonRunner) -> None:
    agent = json.loads(
        ok("agents", "create", "ada", "--persona", PERSONA, "--context-window", "1000", "--json")
    )
    result = run_agentctl("chat", "-a", "ada", "-p", "hello")
    assert result.returncode == 1
    assert "prompt_floor" in result.stderr
    assert f"agentctl agents update {agent['id']} --context-window 8192" in result.stderr
    assert "raise AGENTD_CONTEXT_WINDOW" not in result.stderr


def test_an_imported_agent_without_reflections_says_so(
    serving: DaemonRunner, agentd_home: Path
) -> None:
    ok("chat", "-p", "hello")
    archive = agentd_home / "default.tar.gz"
    ok("export", "-o", str(archive))
    ok("import", str(archive), "--name", "copy")
    for agent in ("copy", "default"):
        result = run_agentctl("reflections", "-a", agent)
        assert (result.returncode, result.stdout) == (0, "")
        assert result.stderr == "no reflections yet\n"
    assert json.loads(ok("reflections", "-a", "copy", "--json")) == []


def test_status_gives_worker_start_times_in_iso_8601(
    redis_server: RedisForTests, serving: DaemonRunner
) -> None:
    heartbeat = Heartbeat(locate(Settings()), every_s=1.0)  # the embedded Valkey's
    heartbeat.start("reflector-1@here", "test", 1)
    try:

        def workers() -> list[dict[str, object]]:
            return json.loads(ok("status", "--json"))["redis"]["workers"]

        wait_for(lambda: workers() != [], "the worker in agentctl status")
        started = workers()[0]["started_at"]
        assert isinstance(started, str)
        assert datetime.fromisoformat(started).tzinfo is not None
    finally:
        heartbeat.stop()
