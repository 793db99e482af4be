"""A remote worker (its own network and mount namespaces: :mod:`tests.support.remote`)
dies with -9 mid-job, or Redis restarts under it: the fact lands in memory exactly once.
Real processes: the daemon, the embedded Valkey on TCP with a password, Celery workers."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.coordination import redis_keys
from shared.models.reflection import ReflectionOutcome
from tests.support.daemon import DaemonRunner
from tests.support.remote import RemoteWorker, remote_redis, unavailable
from tests.support.waiting import wait_for
from tests.support.workers import WorkerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable() is not None, reason=f"no remote worker: {unavailable()}"),
]

SAID = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]
PASSWORD = f"pw-{secrets.token_hex(16)}"
FACT = "- 我更喜欢用 tabs 缩进"


@pytest.fixture
def remote(agentd_home: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with remote_redis(agentd_home, tmp_path, PASSWORD) as parts:
        yield parts


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    paths = list(home.glob("agents/*/reflections/log.jsonl"))
    lines = paths[0].read_text().splitlines() if paths else []
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def _running(home: Path, remote: dict[str, Any]) -> bool:
    """Whether the agent's sent job is running on a worker (it holds the lease)."""
    client = remote["redis"].client
    for sent in home.glob("agents/*/reflections/outbox/*.json"):
        state = client.get(redis_keys.job_state(sent.stem))
        if state is not None and b'"running"' in state:
            return True
    return False


def _reflect_with_a_slow_remote_worker(
    daemon: DaemonRunner, home: Path, remote: dict[str, Any]
) -> RemoteWorker:
    slow = RemoteWorker(
        remote["link"],
        remote["url"],
        remote["out"] / "remote.out",
        AGENTD_MOCK_LATENCY_S="2",
        AGENTD_REFLECTION_LEASE_S="3",
    )
    remote["workers"].append(slow.start())
    daemon.start(reflection_wait_s=0, reflection_lease_s=3, redis_password=PASSWORD)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})
    for text in SAID:
        daemon.result("chat", {"text": text})
    wait_for(lambda: _running(home, remote), "the remote worker to start the job", timeout_s=60)
    return slow


def _landed_once(daemon: DaemonRunner, home: Path) -> None:
    wait_for(
        lambda: any(o.status == "merged" for o in _outcomes(home)),
        "the job to merge",
        timeout_s=120,
    )
    human = daemon.result("memory.show", {"path": "system/human.md"})["text"]
    assert human.count(FACT) == 1
    statuses = [(o.status, o.reason) for o in _outcomes(home)]
    assert statuses == [("merged", None)], statuses
    subjects = [c["subject"] for c in daemon.result("memory.log")["commits"]]
    assert len([s for s in subjects if "(reflection)" in s]) == 1, subjects
    wait_for(lambda: not list(home.glob("agents/*/reflections/outbox/*.json")), "settled")


def test_a_remote_worker_killed_mid_job_the_job_runs_again_locally_and_lands_once(
    daemon: DaemonRunner, agentd_home: Path, remote: dict[str, Any]
) -> None:
    slow = _reflect_with_a_slow_remote_worker(daemon, agentd_home, remote)

    slow.kill_hard()
    local = WorkerProcess(
        agentd_home, "local", AGENTD_REFLECTION_LEASE_S="3", AGENTD_REDIS_PASSWORD=PASSWORD
    )
    remote["workers"].append(local.start())

    _landed_once(daemon, agentd_home)
    assert "reflection_answered" in local.output()
    assert "reflection_answered" not in slow.output()


def test_redis_restarted_under_a_remote_workers_job_it_lands_once(
    daemon: DaemonRunner, agentd_home: Path, remote: dict[str, Any]
) -> None:
    _reflect_with_a_slow_remote_worker(daemon, agentd_home, remote)

    remote["redis"].kill_hard()
    remote["redis"].start()  # the same port and password; it loads its append-only file

    _landed_once(daemon, agentd_home)
