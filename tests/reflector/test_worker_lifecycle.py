"""A worker's life: its app is built from Settings, and ``agentctl status`` lists it only
while it runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.daemon.status import redis_status
from reflector.app import create_app
from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.settings import Settings
from shared.store.layout import Layout
from tests.security.walls import CANARY_KEY
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests, WorkerProcess

pytestmark = pytest.mark.slow


def test_the_app_follows_the_settings_it_is_given(agentd_home: Path) -> None:
    settings = Settings(
        home=agentd_home,
        redis_url="redis://127.0.0.1:6390/3",
        reflection_time_limit_s=600,
        redis_timeout_s=7,
    )

    app = create_app(settings)

    assert app.conf.broker_url == "redis://127.0.0.1:6390/3"
    assert redis_keys.REFLECT_TASK in app.tasks
    assert (app.conf.task_time_limit, app.conf.task_soft_time_limit) == (600, 540)
    assert app.conf.broker_connection_timeout == 7


def test_two_apps_in_one_process_each_run_their_own_task(agentd_home: Path) -> None:
    """Each app's reflect task is its own, made with its settings: Celery shares a task
    with every later app unless told not to, and then the first app's task would answer
    for the second."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = create_app(Settings(home=agentd_home, reflection_time_limit_s=600))
        second = create_app(Settings(home=agentd_home, reflection_time_limit_s=900))
        tasks = [app.tasks[redis_keys.REFLECT_TASK] for app in (first, second)]

    assert tasks[0].run is not tasks[1].run
    assert [task.app for task in tasks] == [first, second]


def test_celery_hands_out_a_job_once_and_only_to_a_free_process(agentd_home: Path) -> None:
    """Celery is the transport, not an owner of recovery: it acknowledges a message as the
    job starts and never restores one to the queue (the daemon alone sends a lost job
    again, by the lease), and a busy worker reserves nothing behind its running job."""
    app = create_app(Settings(home=agentd_home))

    assert app.conf.task_acks_late is False
    assert app.conf.task_reject_on_worker_lost is not True
    assert app.conf.worker_disable_prefetch is True
    assert "visibility_timeout" not in (app.conf.broker_transport_options or {})


def test_importing_the_worker_code_reads_no_settings(agentd_home: Path) -> None:
    """Only the entry point (``reflector.worker``) reads them: a bad setting breaks the
    worker that starts with it, not every import of the app or the task."""
    imported = subprocess.run(
        [sys.executable, "-c", "import reflector.app, reflector.tasks"],
        env={**os.environ, "AGENTD_WORKERS": "-1"},
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )
    assert imported.returncode == 0, imported.stderr


@pytest.fixture
def redis(agentd_home: Path) -> Iterator[RedisForTests]:
    server = RedisForTests(agentd_home).start()
    yield server
    server.stop()


def _listed(home: Path) -> list[str]:
    report = asyncio.run(redis_status(locate(Settings(home=home)), Layout(home)))
    return [worker["name"] for worker in report["workers"]]


def test_a_worker_is_listed_while_it_runs_and_leaves_status_when_it_dies(
    agentd_home: Path, redis: RedisForTests
) -> None:
    killed = WorkerProcess(agentd_home, "killed")
    stopped = WorkerProcess(agentd_home, "stopped", OPENAI_API_KEY=CANARY_KEY)
    try:
        for worker in (killed, stopped):
            worker.start()
        wait_for(lambda: len(_listed(agentd_home)) >= 2, "the workers to announce themselves")
        (announcement,) = redis.client.keys(redis_keys.worker("killed@*"))
        assert stopped.proc is not None
        for pid in _process_tree(stopped.proc.pid):
            assert CANARY_KEY.encode() not in Path(f"/proc/{pid}/environ").read_bytes()

        killed.kill_hard()
        assert 0 < redis.client.ttl(announcement) <= 10  # gone 10 s after a kill -9 at most
        stopped.stop()
        assert [name.split("@")[0] for name in _listed(agentd_home)] == ["killed"]
    finally:
        killed.stop()
        stopped.stop()


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a worker's pool children), from ``/proc``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(grand for child in children for grand in _process_tree(int(child)))]
