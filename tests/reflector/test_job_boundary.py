"""Every job ends with a recorded outcome, whatever goes wrong, and never runs forever or
merges without its lease; damaged state files harm one job, not every job; core memory
stays within its budget (issue 9, items 5, 6 and 8)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import redis
from celery.exceptions import SoftTimeLimitExceeded
from redis.backoff import NoBackoff
from redis.retry import Retry
from structlog.testing import capture_logs

from reflector.checkout import collect, create_worktree
from shared.coordination import jobs, keys
from shared.models.reflection import ReflectionOutcome
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import MockProvider
from shared.providers.mock_reflector import MockReflector
from shared.reflection import events
from shared.reflection.backoff import load_backoff
from tests.reflector.conftest import World, watermark
from tests.support.workers import RedisForTests


def _logged(world: World) -> list[ReflectionOutcome]:
    lines = (world.reflections / "log.jsonl").read_text().splitlines()
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def _published(client: redis.Redis) -> list[ReflectionOutcome]:
    entries = client.xrange(events.OUTCOME_STREAM)
    return [ReflectionOutcome.model_validate_json(fields[b"outcome"]) for _, fields in entries]


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
    assert _published(redis_server.client) == [outcome]
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


class WindowTimesOut(Provider):
    """The agent's model, whose window is asked for once the worktree exists (for the
    memory budget): Celery's soft time limit strikes right there, outside any turn."""

    model = "mock"

    @property
    def context_window(self) -> int:  # type: ignore[override]
        raise SoftTimeLimitExceeded()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("never called")


def test_a_soft_time_limit_outside_the_model_loop_is_a_recorded_time_limit(
    world: World, redis_server: RedisForTests
) -> None:
    outcome = world.reflect(
        MockReflector(), redis_client=redis_server.client, agent_provider=WindowTimesOut()
    )

    assert (outcome.status, outcome.reason) == ("failed", "time_limit")
    assert _logged(world) == [outcome]
    assert _published(redis_server.client) == [outcome]
    _no_leftovers(world)
    assert watermark(world) is None


class RedisDiesMidJob(Provider):
    """Reads the payload, then Redis goes away long enough for a lease renewal to fail."""

    model = "mock"
    context_window = 128_000

    def __init__(self, server: RedisForTests) -> None:
        self.server = server
        self.inner = MockReflector()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.server.server.process is not None:
            self.server.stop()
            time.sleep(1.5)  # the 3 s lease renews every 0.75 s
        return await self.inner.complete(request)


def test_redis_gone_mid_job_loses_the_lease_and_nothing_is_merged(
    world: World, redis_server: RedisForTests
) -> None:
    client = _without_retries(redis_server.server.socket_path)

    outcome = world.reflect(RedisDiesMidJob(redis_server), redis_client=client)

    assert (outcome.status, outcome.reason) == ("failed", "lease_lost")
    assert _logged(world) == [outcome]  # on disk, though Redis could not take it
    assert "tabs" not in world.human()
    _no_leftovers(world)
    assert watermark(world) is None


def test_a_job_started_more_than_the_max_tries_fails_without_running(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    for _ in range(3):  # three starts that killed their worker
        jobs.count_try(client, "rq-killer")

    outcome = world.reflect(MockReflector(), redis_client=client, request_id="rq-killer")

    assert (outcome.status, outcome.reason) == ("failed", "redelivered")
    assert "not run again" in outcome.message
    assert not (world.reflections / "payloads").exists()
    assert world.reflect(MockReflector(), redis_client=client, request_id="rq-killer") == outcome


def test_a_worktree_whose_job_is_alive_is_never_swept(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    worktrees = world.reflections / "worktrees"
    alive = create_worktree(world.memory, worktrees, "alive-job", author_email="a@b")
    dead = create_worktree(world.memory, worktrees, "dead-job", author_email="a@b")
    assert collect(alive) and collect(dead)
    client.set(keys.live_reflection(world.agent.id, "alive-job"), "rq-other", ex=30)

    outcome = world.reflect(MockReflector(), redis_client=client)

    assert outcome.status == "merged"
    assert alive.path.exists() and not dead.path.exists()
    branches = world.git("for-each-ref", "--format=%(refname:short)", "refs/heads/reflection/")
    assert branches.split() == ["reflection/alive-job"]


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

    outcome = world.reflect(MockReflector(), redis_client=nowhere)

    assert (outcome.status, outcome.reason) == ("failed", "redis_unavailable")
    assert _logged(world) == [outcome]
