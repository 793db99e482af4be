"""What can go wrong between the daemon and a worker besides the worker itself: a bundle
damaged or cut on its way, memory too large to send, a TLS Redis, a worker of an older
agentd. Each is a clear ``failed`` outcome (or error) with its reason, nothing merged and
nothing lost: the transcript stays unreflected for the next job."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.jobs.prepare import Prepared
from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.providers.mock_reflector import MockReflector
from shared.reflection.backoff import load_backoff
from shared.reflection.job import JOB_FORMAT
from shared.settings import Settings
from tests.reflector.conftest import World, watermark
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.reflection import DictTransfer
from tests.support.waiting import ceiling
from tests.support.workers import RedisForTests

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def _unchanged(world: World, head: str) -> None:
    assert world.git("rev-parse", "HEAD") == head
    assert watermark(world) is None
    assert "tabs" not in world.human()
    assert world.git("for-each-ref", "refs/heads/reflection/") == ""


def _sent(world: World) -> tuple[object, Prepared, DictTransfer]:
    jobs = world.jobs(MockReflector())
    request = world.request()
    prepared = jobs.prepare(request)
    assert isinstance(prepared, Prepared)
    assert isinstance(jobs.transfer, DictTransfer)
    return (jobs, request), prepared, jobs.transfer


@pytest.mark.parametrize("damage", ["flipped", "cut"])
def test_a_bundle_damaged_on_its_way_is_failed_bundle_corrupt(world: World, damage: str) -> None:
    head = world.git("rev-parse", "HEAD")
    (jobs, request), prepared, transfer = _sent(world)
    raw, bundle = transfer.inputs[prepared.ticket.input_id]
    if damage == "flipped":  # same size, a pack that is no pack
        middle = len(bundle) // 2
        bundle = bundle[:middle] + bytes(b ^ 0xFF for b in bundle[middle:])
    else:  # cut short: not the size it was sent as
        bundle = bundle[: len(bundle) // 2]
    transfer.inputs[prepared.ticket.input_id] = (raw, bundle)

    answer = jobs.work(prepared)  # type: ignore[attr-defined]
    outcome = jobs.settle(request, prepared)  # type: ignore[attr-defined]

    assert answer is not None and (answer.status, answer.reason) == ("failed", "bundle_corrupt")
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "bundle_corrupt")
    assert outcome.message.endswith("the transcript can be retried.")
    _unchanged(world, head)
    assert not list((Settings().worker_dir / "jobs").glob("*"))


def _big_memory(world: World) -> str:
    """Memory past 1 MiB that does not compress (two files under the per-file limit)."""
    for name in ("a", "b"):
        (world.memory / f"{name}.bin").write_bytes(os.urandom(700 * 1024))
    world.git("add", "-A")
    world.git("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "big")
    return world.git("rev-parse", "HEAD")


def test_memory_too_large_to_send_is_failed_job_too_large_and_sends_nothing(world: World) -> None:
    head = _big_memory(world)
    jobs = world.jobs(MockReflector(), reflection_job_max_bytes=MIB)

    outcome = jobs.reflect(world.request())

    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "job_too_large")
    assert "AGENTD_REFLECTION_JOB_MAX_BYTES" in outcome.message and "1,048,576" in outcome.message
    assert isinstance(jobs.transfer, DictTransfer) and jobs.transfer.inputs == {}
    _unchanged(world, head)
    assert load_backoff(world.reflections).delay_s == 60


def test_a_bundle_over_the_workers_own_bound_is_refused_unread(world: World) -> None:
    head = _big_memory(world)
    (jobs, request), prepared, _ = _sent(world)
    small = Settings(home=world.home, reflection_job_max_bytes=MIB, reflection_lease_s=3)

    answer = jobs.work(prepared, settings=small)  # type: ignore[attr-defined]
    outcome = jobs.settle(request, prepared)  # type: ignore[attr-defined]

    assert answer is not None and answer.reason == "job_too_large"
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "job_too_large")
    assert "this worker's AGENTD_REFLECTION_JOB_MAX_BYTES" in outcome.message
    _unchanged(world, head)


def test_a_tls_redis_url_gives_celery_the_certificate_check_too() -> None:
    url = "rediss://:pw@redis.example:6380/0?ssl_ca_certs=/etc/agentd/ca.pem"

    location = locate(Settings(redis_url=url))

    assert location.celery_ssl == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/etc/agentd/ca.pem",
    }
    assert "ssl_cert_reqs=required" in location.redis_url
    assert location.celery_url == "rediss://:pw@redis.example:6380/0"
    relaxed = locate(Settings(redis_url="rediss://h:6380/0?ssl_cert_reqs=none"))
    assert relaxed.celery_ssl == {"ssl_cert_reqs": ssl.CERT_NONE}
    with pytest.raises(ValueError, match="use required, optional or none"):
        locate(Settings(redis_url="rediss://h:6380/0?ssl_cert_reqs=maybe"))


def test_agentd_worker_refuses_a_tls_setting_it_cannot_read_and_a_dir_in_the_home(
    agentd_home: Path,
) -> None:
    def worker(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentd.cli", "worker"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=ceiling(60),
        )

    bad_tls = worker(AGENTD_REDIS_URL="rediss://h:6380/0?ssl_cert_reqs=maybe")
    inside = worker(AGENTD_WORKER_DIR=str(agentd_home / "worker"))

    assert bad_tls.returncode == 2 and "ssl_cert_reqs=maybe" in bad_tls.stderr
    assert inside.returncode == 2 and "is inside AGENTD_HOME" in inside.stderr
    assert not (agentd_home / "worker").exists()


def test_a_worker_of_an_older_agentd_is_listed_as_taking_no_jobs(
    daemon: DaemonRunner, redis_server: RedisForTests
) -> None:
    announced = {"name": "reflector-1@old-host", "host": "old-host", "pid": 7}  # no format
    redis_server.client.set(redis_keys.worker("reflector-1@old-host:7"), json.dumps(announced))
    current = {**announced, "name": "reflector-2@new-host", "host": "new-host", "pid": 8}
    current["format"] = JOB_FORMAT
    redis_server.client.set(redis_keys.worker("reflector-2@new-host:8"), json.dumps(current))
    daemon.start()

    workers = daemon.result("status")["redis"]["workers"]
    shown = run_agentctl("status")

    assert {w["name"]: w["current"] for w in workers} == {
        "reflector-1@old-host": False,
        "reflector-2@new-host": True,
    }
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("workers")]
    assert "reflector-1@old-host (older agentd: takes no jobs)" in line
    assert line.count("older agentd") == 1 and "reflector-2@new-host" in line
