"""Reflection on the real stack: the daemon, an embedded Valkey and Celery worker
processes (no eager mode, no fake Redis). Slow by nature: each test starts processes."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from shared.clock import user_zone
from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.models.reflection import ReflectionOutcome
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection.job import JobMessage
from shared.settings import Settings
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests, WorkerProcess

pytestmark = pytest.mark.slow

SAID = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]


@pytest.fixture
def stack(agentd_home: Path) -> Iterator[dict[str, Any]]:
    parts: dict[str, Any] = {"workers": []}
    yield parts
    for worker in parts["workers"]:
        worker.stop()
    if "redis" in parts:
        parts["redis"].stop()


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line["data"] for line in lines if line.get("event") == name]


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    paths = list(home.glob("agents/*/reflections/log.jsonl"))
    if not paths:
        return []
    return [
        ReflectionOutcome.model_validate_json(line) for line in paths[0].read_text().splitlines()
    ]


def _running(home: Path, client: Any) -> bool:
    """Whether the agent's sent job is running in a worker (it holds the agent's lease)."""
    sent = list(home.glob("agents/*/reflections/outbox/*.json"))
    return bool(sent) and any(
        (state := client.get(redis_keys.job_state(path.stem))) is not None and b'"running"' in state
        for path in sent
    )


def _human(daemon: DaemonRunner) -> str:
    return daemon.result("memory.show", {"path": "system/human.md"})["text"]


def test_the_seed_walkthrough_on_the_running_stack(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any], clock: FakeClock
) -> None:
    stack["redis"] = RedisForTests(agentd_home).start()
    stack["workers"].append(WorkerProcess(agentd_home).start())
    daemon.start(reflection_wait_s=30, clock=clock)

    settings = daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
    assert settings == {"trigger": "step-count", "stepCount": 3, "merge": "auto"}
    first, second, third = (daemon.call("chat", {"text": text}) for text in SAID)

    assert not _events(first, "reflection") and not _events(second, "reflection")
    (reflection,) = _events(third, "reflection")
    assert reflection["status"] == "merged"
    assert reflection["line"] == (
        f"☾ reflection {reflection['reflection_id']}: merged — Merged 1 reflection commit(s)."
    )
    subjects = [c["subject"] for c in daemon.result("memory.log")["commits"]]
    assert subjects[-1] == "chore: initialize local memory"
    assert subjects[0].startswith("feat(reflection): ") and subjects[0].endswith("🔮")
    today = clock().astimezone(user_zone()[0]).date()  # "今天" on the worker's calendar
    human = _human(daemon)
    assert "- 我更喜欢用 tabs 缩进\n" in human and f"- {today} 我们决定以后一律用 pnpm\n" in human
    assert "报错" not in human

    asked = daemon.call("chat", {"text": "你知道我什么？"})
    assert _events(asked, "memory_update")
    assert asked[-1]["result"]["text"] == (
        f"我记得关于你的这些：\n- 我更喜欢用 tabs 缩进\n- {today} 我们决定以后一律用 pnpm"
    )


def test_with_redis_down_chat_works_and_the_reflection_runs_once_it_is_back(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    # A turn that waited for its reflection would wait this long: far past the check below.
    daemon.start(reflection_wait_s=min(ceiling(60), 3_600))
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
    started = time.monotonic()
    for text in SAID:
        assert daemon.result("chat", {"text": text})["stop_reason"] == "end_turn"
    assert time.monotonic() - started < ceiling(30), "a turn waited for Redis"
    assert list(agentd_home.glob("agents/*/reflections/outbox/*.json"))

    stack["redis"] = RedisForTests(agentd_home).start()
    stack["workers"].append(WorkerProcess(agentd_home).start())

    wait_for(
        lambda: any(o.status == "merged" for o in _outcomes(agentd_home)),
        "the queued reflection",
        timeout_s=40,
    )
    assert "- 我更喜欢用 tabs 缩进" in _human(daemon)
    wait_for(
        lambda: not list(agentd_home.glob("agents/*/reflections/outbox/*.json")),
        "the outbox to empty",
        timeout_s=20,
    )


def test_a_worker_killed_mid_job_is_redelivered_and_the_memory_ends_right(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    stack["redis"] = RedisForTests(agentd_home).start()
    slow = WorkerProcess(
        agentd_home, "slow", AGENTD_MOCK_LATENCY_S="2", AGENTD_REFLECTION_LEASE_S="3"
    ).start()
    stack["workers"].append(slow)
    daemon.start(reflection_wait_s=0, reflection_lease_s=3)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
    for text in SAID:
        daemon.result("chat", {"text": text})
    client = stack["redis"].client
    wait_for(lambda: _running(agentd_home, client), "the job to start", timeout_s=30)
    scratch = Path(slow.env["AGENTD_WORKER_DIR"]) / "jobs"
    # The worker marks the job running, then opens its scratch: wait for that, not assume it.
    wait_for(
        lambda: scratch.is_dir() and any(scratch.iterdir()),
        "the job to run in the worker's own scratch",
        timeout_s=30,
    )

    slow.kill_hard()
    assert client.hlen("unacked") == 0, "Celery keeps no copy to hand out: the daemon resends"
    worktrees = next(agentd_home.glob("agents/*")) / "reflections" / "worktrees"
    assert not worktrees.exists() or not any(worktrees.iterdir()), "the worker wrote the home"
    stack["workers"].append(
        WorkerProcess(agentd_home, "fresh", AGENTD_REFLECTION_LEASE_S="3").start()
    )

    wait_for(
        lambda: any(o.status == "merged" for o in _outcomes(agentd_home)),
        "the redelivered job",
        timeout_s=60,
    )
    human = _human(daemon)
    assert human.count("- 我更喜欢用 tabs 缩进") == 1
    assert not any(worktrees.iterdir())
    assert not any(scratch.iterdir()), "the dead job's scratch was swept when a worker started"
    memory = next(agentd_home.glob("agents/*/memory"))
    branches = subprocess.run(
        ["git", "-C", str(memory), "branch", "--list", "reflection/*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert branches == ""
    statuses = [(o.status, o.reason) for o in _outcomes(agentd_home)]
    assert statuses.count(("merged", None)) == 1, statuses
    assert daemon.result("reflection.list")["reflections"][-1]["status"] == "merged"


def test_turns_that_edit_memory_while_a_reflection_runs_both_land(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    stack["redis"] = RedisForTests(agentd_home).start()
    stack["workers"].append(WorkerProcess(agentd_home, "slow", AGENTD_MOCK_LATENCY_S="1").start())
    chat_model = ScriptedProvider([text_reply("ok")] * 3)
    daemon.start(provider=chat_model, reflection_wait_s=0)
    for text in SAID:
        daemon.result("chat", {"text": text})
    memory_dir = Path(daemon.result("memory.path")["path"])
    named = re.search(r'<memory dir="([^"]+)">', chat_model.requests[-1].system)
    assert named is not None
    note = {
        "path": f"{named[1]}/notes/deploy.md",  # as the system prompt names memory
        "content": "---\ndescription: How we deploy\n---\nWith pnpm.\n",
    }
    chat_model.enqueue(tool_reply(("write_file", json.dumps(note))), text_reply("saved"))

    queued = daemon.result("reflection.request", {})
    assert queued["queued"] is True
    wait_for(lambda: _running(agentd_home, stack["redis"].client), "the reflection to start")
    assert daemon.result("chat", {"text": "记一下部署方式"})["stop_reason"] == "end_turn"

    wait_for(
        lambda: any(o.status == "merged" for o in _outcomes(agentd_home)),
        "the reflection",
        timeout_s=60,
    )
    human = _human(daemon)
    assert "- 我更喜欢用 tabs 缩进" in human
    assert (memory_dir / "notes" / "deploy.md").read_text().endswith("With pnpm.\n")
    status = subprocess.run(
        ["git", "-C", str(memory_dir), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert status == ""
    subjects = [c["subject"] for c in daemon.result("memory.log")["commits"]]
    assert "write_file: create notes/deploy.md" in subjects
    assert any("(reflection): " in s for s in subjects)


def test_a_copy_of_a_running_job_records_no_outcome_of_its_own(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    """A job delivered twice while it runs (the daemon sent it again while a worker cut
    off from Redis still ran it; Redis handed out one message twice): the copy finds its
    own job holding the agent's lease and does nothing, and the request still gets
    exactly one outcome. The copy reaches the idle worker: a busy one reserves no message
    behind the job it runs."""
    stack["redis"] = RedisForTests(agentd_home).start()
    stack["workers"].append(WorkerProcess(agentd_home, "first", AGENTD_MOCK_LATENCY_S="3").start())
    daemon.start(reflection_wait_s=0)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
    for text in SAID:
        daemon.result("chat", {"text": text})
    agent_dir = next(agentd_home.glob("agents/*"))
    wait_for(lambda: _running(agentd_home, stack["redis"].client), "the job to start", timeout_s=30)
    (sent,) = (agent_dir / "reflections" / "outbox").glob("*.json")
    job = f"reflector.reflect[{sent.stem}]"
    ticket = json.loads(sent.read_text())["ticket"]
    copy = JobMessage(
        job_id=sent.stem,
        input_id=ticket["input_id"],
        agent_id=agent_dir.name,
        input_bytes=ticket["bundle_bytes"],
    )
    sender = Celery("copy", broker=locate(Settings(home=agentd_home)).celery_url)
    sender.send_task(
        redis_keys.REFLECT_TASK,
        kwargs={"job": copy.model_dump(mode="json")},
        queue=redis_keys.REFLECTION_QUEUE,
        task_id=sent.stem,
    )
    sender.close()

    second = WorkerProcess(agentd_home, "second").start()
    stack["workers"].append(second)
    wait_for(
        lambda: f"{job} received" in second.output(), "the copy to reach a worker", timeout_s=30
    )
    wait_for(lambda: f"{job} succeeded" in second.output(), "the copy to end", timeout_s=30)
    wait_for(lambda: bool(_outcomes(agentd_home)), "the job's outcome", timeout_s=60)

    (outcome,) = _outcomes(agentd_home)
    assert outcome.status == "merged"
    listed = daemon.result("reflection.list")["reflections"]
    assert [(r["reflection_id"], r["status"]) for r in listed] == [
        (outcome.reflection_id, "merged")
    ]
    assert "reflection_copy_not_run" in second.output()
