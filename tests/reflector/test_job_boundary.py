"""Every job ends with a recorded outcome, whatever goes wrong, never runs forever, and
its answer lands once even when Redis restarts under it; damaged state files harm one job,
not every job; core memory stays within its budget (issue 9, items 5, 6 and 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded
from redis.backoff import NoBackoff
from redis.retry import Retry
from structlog.testing import capture_logs

from agentd.jobs.record import record
from reflector import work
from shared.coordination import jobs
from shared.models.reflection import ReflectionOutcome
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import MockProvider
from shared.providers.mock_reflector import MockReflector
from shared.reflection.backoff import load_backoff
from shared.settings import Settings
from shared.store.layout import Layout
from tests.reflector.conftest import World, watermark
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests


def _logged(world: World) -> list[ReflectionOutcome]:
    lines = (world.reflections / "log.jsonl").read_text().splitlines()
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def _without_retries(socket_path: Path) -> redis.Redis:
    """A client that fails at once when Redis is gone (redis-py retries with backoff)."""
    return redis.Redis(
        unix_socket_path=str(socket_path), socket_timeout=1, retry=Retry(NoBackoff(), 0)
    )


def _no_leftovers(world: World) -> None:
    assert world.git("branch", "--list", "reflection/*") == ""
    assert not list((world.reflections / "worktrees").glob("*"))


def test_an_os_error_mid_job_is_a_recorded_and_published_failure(
    world: World, redis_server: RedisForTests
) -> None:
    (world.reflections / "payloads").parent.mkdir(parents=True, exist_ok=True)
    (world.reflections / "payloads").write_text("a file where a directory should be")

    outcome = world.reflect(MockReflector(), redis_client=redis_server.client)

    assert (outcome.status, outcome.reason) == ("failed", "os_error")
    assert "the transcript can be retried" in outcome.message
    assert _logged(world) == [outcome]
    assert jobs.finished(redis_server.client, outcome.request_id) == outcome
    assert watermark(world) is None


class TimesOut(Provider):
    """A model call interrupted by Celery's soft time limit."""

    model = "slow"
    context_window = 128_000

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise SoftTimeLimitExceeded()


def test_a_soft_time_limit_during_a_model_call_ends_the_run_failed(world: World) -> None:
    outcome = world.reflect(TimesOut())

    assert outcome.status == "failed"
    assert _logged(world) == [outcome]
    _no_leftovers(world)
    assert watermark(world) is None


def test_a_soft_time_limit_outside_the_model_loop_is_a_recorded_time_limit(
    world: World, redis_server: RedisForTests, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped(_path: Path) -> str:
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(work, "parent_snapshot", stopped)  # after the clone, before the run

    outcome = world.reflect(MockReflector(), redis_client=redis_server.client)

    assert (outcome.status, outcome.reason) == ("failed", "time_limit")
    assert _logged(world) == [outcome]
    assert jobs.finished(redis_server.client, outcome.request_id) == outcome
    _no_leftovers(world)
    assert not list((Settings().worker_dir / "jobs").glob("*"))
    assert watermark(world) is None


class RedisRestartsMidJob(Provider):
    """Reads the payload while Redis goes away, long enough for a lease renewal to fail,
    and comes back."""

    model = "mock"
    context_window = 128_000

    def __init__(self, server: RedisForTests) -> None:
        self.server = server
        self.inner = MockReflector()
        self.restarted = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if not self.restarted:
            self.restarted = True
            with capture_logs() as logged:
                self.server.kill_hard()
                wait_for(
                    lambda: any(e["event"] == "reflection_lease_not_renewed" for e in logged),
                    "a renewal of the lease to fail",
                )
            self.server.start()
        return await self.inner.complete(request)


@pytest.mark.slow
def test_redis_restarted_mid_job_the_answer_is_stored_and_lands_once(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client

    outcome = world.reflect(RedisRestartsMidJob(redis_server), redis_client=client)

    assert outcome.status == "merged"
    assert world.human().count("- 我更喜欢用 tabs 缩进") == 1
    assert _logged(world) == [outcome]
    assert jobs.finished(client, outcome.request_id) == outcome
    _no_leftovers(world)


def test_a_job_started_more_than_the_max_tries_fails_without_running(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    for _ in range(3):  # three starts that killed their worker
        jobs.count_try(client, "rq-killer")

    outcome = world.reflect(MockReflector(), redis_client=client, request_id="rq-killer")

    assert (outcome.status, outcome.reason) == ("failed", "redelivered")
    assert "not run again" in outcome.message
    assert not list((Settings().worker_dir / "jobs").glob("*"))  # nothing was run
    assert world.reflect(MockReflector(), redis_client=client, request_id="rq-killer") == outcome


def test_a_garbled_backoff_file_is_reset_with_a_warning_and_the_job_runs(world: World) -> None:
    world.reflections.mkdir(parents=True, exist_ok=True)
    (world.reflections / "backoff.json").write_text('{"retry_at": "tomorrow-ish"')

    with capture_logs() as logs:
        outcome = world.reflect(MockReflector())

    assert outcome.status == "merged"
    assert any(entry["event"] == "backoff_state_reset" for entry in logs)
    assert load_backoff(world.reflections).retry_at is None
    json.loads((world.reflections / "backoff.json").read_text())


def test_a_damaged_agent_record_is_refused_before_anything_is_prepared(world: World) -> None:
    record = world.home / "agents" / world.agent.id / "agent.json"
    record.write_text(record.read_text()[:40])

    outcome = world.reflect(MockReflector())

    assert (outcome.status, outcome.reason) == ("failed", "corrupt_state_file")
    assert str(record) in outcome.message
    assert not (world.reflections / "payloads").exists()
    assert world.git("branch", "--list", "reflection/*") == ""


@pytest.mark.slow
def test_a_reflection_that_would_push_core_memory_over_budget_is_not_merged(
    world: World,
) -> None:
    world.say(*[f"I always want the long preference number {n:03d} kept" for n in range(120)])
    head = world.git("rev-parse", "HEAD")
    small_window = MockProvider(context_window=4_000)

    outcome = world.reflect(MockReflector(), agent_provider=small_window)

    assert (outcome.status, outcome.reason) == ("failed", "memory_over_budget")
    assert "1,600 allowed" in outcome.message and "system/" in outcome.message
    assert world.git("rev-parse", "HEAD") == head
    assert watermark(world) is None
    assert load_backoff(world.reflections).delay_s == 60
    _no_leftovers(world)


def test_a_reflection_within_the_budget_merges_on_a_small_window(world: World) -> None:
    outcome = world.reflect(MockReflector(), agent_provider=MockProvider(context_window=4_000))
    assert outcome.status == "merged"


def test_the_outcome_reaches_the_disk_when_redis_cannot_take_it(
    world: World, agentd_home: Path
) -> None:
    nowhere = _without_retries(agentd_home / "run" / "nothing.sock")
    jobs_ = world.jobs(MockReflector())
    outcome = jobs_.reflect(world.request())
    assert outcome is not None and outcome.status == "merged"
    (world.reflections / "log.jsonl").unlink()

    record(Layout(agentd_home), outcome, nowhere, "rq-x-input")

    assert _logged(world) == [outcome]
