"""Memory you can trust, on the real stack (daemon, Valkey, Celery workers): a trigger during
a reflection runs next instead of vanishing, a long conversation lands whole, and a crash
of every process at once does not stall reflection (issue 9, items 1–3)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon.agents import Agents
from agentd.daemon.requests import AgentCreate
from shared.models.reflection import ReflectionOutcome
from shared.reflection.policy import ReflectionOverrides
from shared.reflection.state import load_state, record_turn
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests, WorkerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def stack(agentd_home: Path) -> Iterator[dict[str, Any]]:
    parts: dict[str, Any] = {"workers": [], "redis": RedisForTests(agentd_home).start()}
    yield parts
    for worker in parts["workers"]:
        worker.stop()
    if "daemon" in parts:
        parts["daemon"].stop()
    parts["redis"].stop()


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    lines = [
        line
        for path in home.glob("agents/*/reflections/log.jsonl")
        for line in path.read_text().splitlines()
    ]
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def _merged(home: Path) -> int:
    return sum(o.status == "merged" for o in _outcomes(home))


def _human(daemon: DaemonRunner) -> str:
    return daemon.result("memory.show", {"path": "system/human.md"})["text"]


def _running(home: Path) -> bool:
    worktrees = list(home.glob("agents/*/reflections/worktrees/*"))
    return bool(worktrees)


def test_turns_during_a_reflection_are_reflected_next_without_another_turn(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    stack["workers"].append(WorkerProcess(agentd_home, AGENTD_MOCK_LATENCY_S="0.7").start())
    daemon.start(reflection_wait_s=0)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 2})
    facts = ["I always use tabs", "I always use pnpm", "I always use ruff", "I always rebase"]
    for text in facts[:2]:
        daemon.result("chat", {"text": text})
    wait_for(lambda: _running(agentd_home), "the first reflection to start", timeout_s=30)

    for text in facts[2:]:  # due again while the first one runs
        daemon.result("chat", {"text": text})
    assert _merged(agentd_home) == 0, "the first reflection was not slow enough to overlap"

    wait_for(
        lambda: _merged(agentd_home) == 2, "the second reflection, with no new turn", timeout_s=60
    )
    human = _human(daemon)
    assert [human.count(f"- {fact}\n") for fact in facts] == [1, 1, 1, 1]
    assert (
        load_state(next(agentd_home.glob("agents/*/conversations/*"))).steps_since_last_reflection
        == 0
    )


def _agent_with_facts(home: Path, count: int) -> None:
    """The default agent, reflection off, after ``count`` turns that each state a fact."""
    agents = Agents(Layout(home))
    agent = asyncio.run(agents.create(AgentCreate(name="default")))
    agent.reflection = ReflectionOverrides(trigger="off")
    agents.store.save(agent)
    chat = agents.conversation(agent, None)
    for n in range(count):
        chat.append(
            [
                chat.new_message(role="user", content=f"I always want fact-{n:04d} remembered"),
                chat.new_message(role="assistant", content="noted"),
            ]
        )
    record_turn(chat.directory, count)
    agents.close()


def _facts_in_memory(daemon: DaemonRunner) -> list[str]:
    return [line for line in _human(daemon).splitlines() if "fact-" in line]


def test_150_facts_said_with_the_trigger_off_all_land_with_reflect_wait(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    _agent_with_facts(agentd_home, 150)
    stack["workers"].append(WorkerProcess(agentd_home).start())
    daemon.start()

    result = daemon.result("reflection.request", {"wait_s": 60})

    assert result["outcome"]["status"] == "merged"
    facts = _facts_in_memory(daemon)
    assert facts == [f"- I always want fact-{n:04d} remembered" for n in range(150)]


def test_1000_facts_land_exactly_once_as_the_daemon_asks_for_job_after_job(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    _agent_with_facts(agentd_home, 1000)
    stack["workers"].append(WorkerProcess(agentd_home).start())
    daemon.start()

    first = daemon.result("reflection.request", {"wait_s": 60})["outcome"]
    assert first["status"] == "merged" and first["unread"]

    outbox = next(agentd_home.glob("agents/*")) / "reflections" / "outbox"

    def done() -> bool:
        """No request is waiting and the last job left nothing unread (the outbox alone is
        briefly empty between settling one job and recording the next)."""
        outcomes = _outcomes(agentd_home)
        return not list(outbox.glob("*.json")) and not outcomes[-1].unread

    wait_for(done, "the remaining jobs", timeout_s=120)
    assert _merged(agentd_home) > 1
    facts = _facts_in_memory(daemon)
    assert facts == [f"- I always want fact-{n:04d} remembered" for n in range(1000)]


def test_a_crash_of_every_process_mid_reflection_does_not_stall_it(
    agentd_home: Path, stack: dict[str, Any]
) -> None:
    # The dead worker's lease would outlive every ceiling of this test: only the takeover
    # of a dead holder's lease lets the reflection go on.
    slow = WorkerProcess(
        agentd_home, "slow", AGENTD_MOCK_LATENCY_S="1", AGENTD_REFLECTION_LEASE_S="86400"
    ).start()
    daemon = stack["daemon"] = AgentdProcess(AGENTD_REFLECTION_WAIT_S="0").start()
    run_agentctl("sleeptime", "--trigger", "step-count", "--steps", "1")
    assert run_agentctl("chat", "-p", "I always want the crash-proof fact").returncode == 0
    wait_for(lambda: _running(agentd_home), "the reflection to start", timeout_s=30)

    slow.kill_hard()
    daemon.kill()
    stack["redis"].kill_hard()

    stack["redis"] = RedisForTests(agentd_home).start()
    stack["workers"].append(WorkerProcess(agentd_home, "fresh").start())
    stack["daemon"] = AgentdProcess().start()
    wait_for(lambda: _merged(agentd_home) == 1, "the reflection after restart", timeout_s=60)

    human = run_agentctl("memory", "show", "system/human.md").stdout
    assert human.count("- I always want the crash-proof fact") == 1
    assert not list(agentd_home.glob("agents/*/reflections/worktrees/*"))
    assert not list(agentd_home.glob("agents/*/reflections/outbox/*.json"))


def _reflection_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["data"] for line in lines if line.get("event") == "reflection"]


def test_uncommitted_memory_edits_are_told_once_and_memory_commit_lets_reflection_run(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    stack["workers"].append(WorkerProcess(agentd_home).start())
    daemon.start(reflection_wait_s=20)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 1})
    memory = Path(daemon.result("memory.path")["path"])
    (memory / "notes.md").write_text("---\ndescription: my notes\n---\nwritten by hand\n")

    (waiting,) = _reflection_lines(daemon.call("chat", {"text": "I always use tabs"}))
    assert (waiting["status"], waiting["reason"]) == ("skipped", "parent_dirty")
    assert "notes.md" in waiting["message"] and "agentctl memory commit" in waiting["message"]
    assert _reflection_lines(daemon.call("chat", {"text": "I always use pnpm"})) == []

    committed = run_agentctl("memory", "commit", "-m", "notes: mine")
    assert committed.returncode == 0 and committed.stdout.startswith("committed ")
    (merged,) = _reflection_lines(daemon.call("chat", {"text": "I always use ruff"}))

    assert merged["status"] == "merged"
    human = _human(daemon)
    assert all(f"- I always use {tool}\n" in human for tool in ("tabs", "pnpm", "ruff"))
    assert (memory / "notes.md").read_text().endswith("written by hand\n")
    assert run_agentctl("memory", "commit").stdout.strip() == "nothing to commit"
