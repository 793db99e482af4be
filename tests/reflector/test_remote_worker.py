"""A worker on another host: nothing but Redis (over TCP, with a password) and its own model
settings. It runs in network and mount namespaces of its own (:mod:`tests.support.remote`):
the daemon's home, under ``/tmp``, does not exist where it runs, and it reaches the
embedded Valkey only through a veth pair. Real processes, no shared file."""

from __future__ import annotations

import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.reflection import outbox
from shared.clock import user_zone
from shared.models.reflection import ReflectionOutcome
from shared.reflection.job import JOB_FORMAT, JobMessage
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.remote import Link, RemoteWorker, remote_redis, unavailable
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable() is not None, reason=f"no remote worker: {unavailable()}"),
]

SAID = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]
PASSWORD = f"pw-{secrets.token_hex(16)}"


@pytest.fixture
def remote(agentd_home: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The embedded Valkey listening on the host's end of a veth pair, with a password."""
    with remote_redis(agentd_home, tmp_path, PASSWORD) as parts:
        yield parts


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    paths = list(home.glob("agents/*/reflections/log.jsonl"))
    lines = paths[0].read_text().splitlines() if paths else []
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def test_a_worker_without_the_home_reaching_redis_over_tcp_merges_the_walkthrough(
    daemon: DaemonRunner, agentd_home: Path, remote: dict[str, Any], clock: FakeClock
) -> None:
    worker = RemoteWorker(remote["link"], remote["url"], remote["out"] / "remote.out")
    remote["workers"].append(worker.start())
    daemon.start(reflection_wait_s=60, clock=clock, redis_password=PASSWORD)
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 3})

    turns = [daemon.call("chat", {"text": text}) for text in SAID]

    (reflection,) = [line["data"] for line in turns[-1] if line.get("event") == "reflection"]
    assert reflection["status"] == "merged"
    assert "reflection_answered" in worker.output()  # it was the remote worker's job
    today = clock().astimezone(user_zone()[0]).date()
    human = daemon.result("memory.show", {"path": "system/human.md"})["text"]
    assert "- 我更喜欢用 tabs 缩进\n" in human and f"- {today} 我们决定以后一律用 pnpm\n" in human
    commits = daemon.result("memory.log")["commits"]
    reflections = [c for c in commits if "(reflection)" in c["subject"]]
    assert len(reflections) == 1 and len(_outcomes(agentd_home)) == 1
    lines = daemon.result("memory.blame", {"path": "system/human.md"})["lines"]
    (line,) = [line for line in lines if "pnpm" in line["text"]]
    provenance = line["commit"]["provenance"]
    assert provenance["kind"] == "reflection"
    assert provenance["job_id"] == reflection["reflection_id"]
    assert provenance["agent_id"].endswith("~reflection")
    assert provenance["reflected_first"] <= provenance["reflected_last"]
    (listed,) = daemon.result("status")["redis"]["workers"]
    assert listed["name"] == f"remote@{socket.gethostname()}"
    assert listed["host"] == socket.gethostname() and listed["current"] is True


def test_a_wrong_password_or_an_unreachable_redis_is_one_clear_line_and_no_worker(
    remote: dict[str, Any],
) -> None:
    link: Link = remote["link"]
    url: str = remote["url"]
    cases = {
        url.replace(PASSWORD, "not-the-password"): "refused the password",
        url.replace(f":{PASSWORD}@", ""): "asks for a password",
        url.rsplit(":", 1)[0] + ":1/0": "cannot reach Redis",
    }
    for redis_url, said in cases.items():
        worker = RemoteWorker(link, redis_url, remote["out"] / "refused.out")
        refused = worker.run("worker")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert refused.stderr.startswith("agentd worker: ") and said in refused.stderr
        assert PASSWORD not in refused.stderr
        assert "reflector_ready" not in refused.stdout + refused.stderr


def test_doctor_on_a_worker_host_checks_redis_the_model_and_the_sandbox(
    remote: dict[str, Any],
) -> None:
    worker = RemoteWorker(remote["link"], remote["url"], remote["out"] / "doctor.out")

    good = worker.run("doctor", "--worker")

    assert good.returncode == 0, good.stdout + good.stderr
    assert "✓ redis: answers with the password given" in good.stdout
    assert "✓ sandbox: sandbox on" in good.stdout and good.stdout.endswith("all good\n")
    wrong_url = remote["url"].replace(PASSWORD, "x" * 20)
    wrong = RemoteWorker(remote["link"], wrong_url, worker.output_path)
    bad = wrong.run("doctor", "--worker")
    assert bad.returncode == 1 and "✗ redis: Redis at redis://" in bad.stdout
    assert "refused the password" in bad.stdout


def test_the_daemons_own_host_reaches_the_listening_valkey_only_with_the_password(
    remote: dict[str, Any], agentd_home: Path
) -> None:
    import redis

    link: Link = remote["link"]
    port = int(remote["url"].rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host=link.host_ip, port=port, socket_timeout=2).ping()
    assert redis.Redis(host=link.host_ip, port=port, password=PASSWORD).ping()
    server = remote["redis"].server.process
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
    assert PASSWORD.encode() not in cmdline  # `ps` shows any user the command line
    config = next((agentd_home / "valkey").glob("*.conf"))
    assert config.stat().st_mode & 0o077 == 0
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert PASSWORD not in ps.stdout


def test_a_job_the_worker_cannot_read_is_failed_worker_outdated_and_nothing_merged(
    daemon: DaemonRunner,
    agentd_home: Path,
    remote: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The daemon runs a newer agentd than the worker: a job of a format the worker does not
    know is answered ``failed: worker_outdated``, not guessed at."""

    class NewerMessage(JobMessage):
        format: int = JOB_FORMAT + 1

    monkeypatch.setattr(outbox, "JobMessage", NewerMessage)  # what the daemon sends
    worker = RemoteWorker(remote["link"], remote["url"], remote["out"] / "old.out")
    remote["workers"].append(worker.start())
    daemon.start(reflection_wait_s=60, redis_password=PASSWORD)
    daemon.result("chat", {"text": SAID[1]})
    head = daemon.result("memory.log")["commits"][0]["sha"]

    outcome = daemon.result("reflection.request", {"wait_s": 60})["outcome"]

    assert outcome is not None
    assert (outcome["status"], outcome["reason"]) == ("failed", "worker_outdated")
    assert "Upgrade agentd on the worker's host" in outcome["message"]
    assert f"format {JOB_FORMAT + 1}" in outcome["message"]
    assert daemon.result("memory.log")["commits"][0]["sha"] == head
    wait_for(lambda: not list(agentd_home.glob("agents/*/reflections/outbox/*.json")), "settled")
