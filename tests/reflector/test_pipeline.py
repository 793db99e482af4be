"""One reflection job end to end, in process (no Celery): the daemon prepares it, a worker
runs it from its inputs alone, the daemon settles the answer: gates, earned success,
finalize, watermark, backoff, follow-ups. Real git, real files; Redis only where the lease
matters."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from agentd.daemon.agents import Agents
from reflector import work
from shared import sandbox
from shared.clock import user_zone
from shared.coordination import redis_keys
from shared.coordination.lease import ReflectionLease
from shared.errors import ProviderAuthError
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock_reflector import MockReflector
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection.backoff import load_backoff
from shared.reflection.policy import ReflectionOverrides
from shared.reflection.state import load_state, record_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import trash_conversation
from shared.store.layout import Layout
from tests.reflector.conftest import READ, World, watermark
from tests.support.workers import RedisForTests


def test_a_good_run_merges_and_moves_the_watermark_then_nothing_is_left(world: World) -> None:
    outcome = world.reflect(MockReflector())

    assert (outcome.status, outcome.message) == ("merged", "Merged 1 reflection commit(s).")
    assert len(outcome.commits) == 1
    today = world.clock().astimezone(user_zone()[0]).date()
    assert f"- 我更喜欢用 tabs 缩进\n- {today} 我们决定以后一律用 pnpm" in world.human()
    assert "报错" not in world.human()
    assert world.git("status", "--porcelain") == ""
    assert world.git("branch", "--list", "reflection/*") == ""
    state = load_state(world.conversation.directory)
    assert state.watermark == list(world.conversation.log)[-1].id
    assert state.steps_since_last_reflection == 0
    logged = (world.reflections / "log.jsonl").read_text().splitlines()
    assert ReflectionOutcome.model_validate_json(logged[-1]).status == "merged"
    assert world.reflect(MockReflector()).reason == "no_payload"


def _weak(*replies: Any) -> ScriptedProvider:
    return ScriptedProvider(list(replies))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("provider", "reason"),
    [
        (lambda: _weak(tool_reply(("bash", READ)), text_reply("")), "empty_report"),
        (lambda: _weak(text_reply("I will read the transcript and update memory.")), "not_read"),
        (lambda: _weak(*[tool_reply(("bash", READ))] * 12), "max_steps"),
    ],
)
def test_weak_models_fail_and_the_same_slice_is_merged_by_a_good_run(
    world: World, provider: Callable[[], ScriptedProvider], reason: str
) -> None:
    failed = world.reflect(provider())

    assert (failed.status, failed.reason) == ("failed", reason)
    assert failed.message.endswith("; the transcript can be retried.")
    assert watermark(world) is None
    assert load_backoff(world.reflections).retry_at is None  # the sub-agent failed: no backoff

    assert world.reflect(MockReflector()).status == "merged"
    assert "- 我更喜欢用 tabs 缩进" in world.human()


def test_reading_the_payload_but_leaving_edits_uncommitted_is_dirty_and_backs_off(
    world: World,
) -> None:
    scribble = json.dumps({"command": 'echo "- half done" >> "$MEMORY_DIR/system/human.md"'})
    outcome = world.reflect(
        _weak(
            tool_reply(("bash", READ)),
            tool_reply(("bash", scribble)),
            text_reply("Updated human.md."),
        )
    )
    assert (outcome.status, outcome.reason) == ("failed", "dirty_uncommitted")
    assert "half done" not in world.human()
    assert watermark(world) is None
    assert load_backoff(world.reflections).delay_s == 60


def test_a_conversation_deleted_after_the_request_is_skipped_not_recreated(
    world: World,
) -> None:
    directory = world.conversation.directory
    trash_conversation(Layout(world.home), world.agent.id, world.conversation.id, world.clock())
    outcome = world.reflect(MockReflector())
    assert (outcome.status, outcome.reason) == ("skipped", "no_payload")
    assert not directory.exists()


def test_a_dirty_parent_is_not_touched_and_nothing_is_prepared(world: World) -> None:
    (world.memory / "scratch.md").write_text("the user's own edit\n")
    outcome = world.reflect(MockReflector())
    assert (outcome.status, outcome.reason) == ("skipped", "parent_dirty")
    assert "scratch.md" in outcome.message
    assert "`agentctl memory commit --agent ada`" in outcome.message
    assert (world.memory / "scratch.md").exists()
    assert not list((world.reflections / "worktrees").glob("*"))
    assert not (world.reflections / "payloads").exists()


class ConflictingProvider(Provider):
    """Edits the name line in its checkout and commits, while the parent changes the same
    line underneath it (another conversation's edit landing mid-reflection)."""

    model = "conflict"
    context_window = 128_000

    def __init__(self, world: World) -> None:
        self.world = world
        self.step = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.step += 1
        if self.step == 1:
            return tool_reply(("bash", READ))
        if self.step == 2:
            command = (
                'cd "$MEMORY_DIR" && printf -- "- call me Ada\\n" >> system/human.md && '
                'git add -A && git commit -qm "feat(reflection): name 🔮"'
            )
            (self.world.memory / "system" / "human.md").write_text(
                self.world.human() + "- call me Lu\n"
            )
            self.world.git("commit", "-qam", "user: name")
            return tool_reply(("bash", json.dumps({"command": command})))
        return text_reply("Recorded the user's name.")


def test_a_conflict_with_newer_memory_aborts_cleanly_and_backs_off(world: World) -> None:
    outcome = world.reflect(ConflictingProvider(world))
    assert (outcome.status, outcome.reason) == ("failed", "merge_conflict")
    assert world.human().endswith("- call me Lu\n")
    assert world.git("status", "--porcelain") == ""
    assert not (world.memory / ".git" / "MERGE_HEAD").exists()
    assert watermark(world) is None
    assert load_backoff(world.reflections).delay_s == 60


@pytest.mark.slow
def test_backoff_doubles_to_30_minutes_and_manual_runs_bypass_it(world: World) -> None:
    expected = [60, 120, 240, 480, 960, 1800, 1800]
    for delay in expected:
        outcome = world.reflect(ConflictingProvider(world))
        assert outcome.reason == "merge_conflict"
        state = load_backoff(world.reflections)
        assert state.delay_s == delay
        world.clock.now += timedelta(seconds=delay - 1)
        deferred = world.reflect(MockReflector())
        assert (deferred.status, deferred.reason) == ("skipped", "retry_backoff")
        world.clock.now += timedelta(seconds=1)  # exactly retry_at: allowed
    manual_while_deferred = world.reflect(MockReflector(), trigger="manual")
    assert manual_while_deferred.status in ("merged", "no_changes")
    assert load_backoff(world.reflections).retry_at is None


class AppendingProvider(Provider):
    """Reads the payload; while it works, the user says more (appended to the log)."""

    model = "appending"
    context_window = 128_000

    def __init__(self, world: World) -> None:
        self.world = world
        self.inner = MockReflector()
        self.appended = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if not self.appended:
            self.appended = True
            self.world.say("以后一律用 ruff 检查代码")
        return await self.inner.complete(request)


@pytest.mark.slow
def test_messages_appended_during_a_run_stay_unreflected(world: World) -> None:
    before_run = list(world.conversation.log)[-1].id
    outcome = world.reflect(AppendingProvider(world))
    assert outcome.status == "merged"
    assert "ruff" not in world.human()
    state = load_state(world.conversation.directory)
    assert state.watermark == before_run
    assert state.steps_since_last_reflection == 1
    again = world.reflect(MockReflector())
    assert again.status == "merged" and "- 以后一律用 ruff 检查代码" in world.human()


@pytest.mark.slow
def test_a_configuration_error_pauses_automatic_runs_until_one_succeeds(world: World) -> None:
    broken = _weak(ProviderAuthError("openai/x: bad key; check OPENAI_API_KEY"))
    failed = world.reflect(broken)
    assert (failed.status, failed.reason) == ("failed", "provider_auth")
    assert "OPENAI_API_KEY" in failed.message
    paused = world.reflect(MockReflector())
    assert (paused.status, paused.reason) == ("skipped", "configuration_error")
    assert world.reflect(MockReflector(), trigger="manual").status == "merged"
    assert load_backoff(world.reflections).pause is None


@pytest.mark.slow
def test_a_job_for_a_busy_agent_is_skipped_and_runs_when_sent_again(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    holder = ReflectionLease(client, world.agent.id, owner="other-job", ttl_s=30)
    assert holder.acquire()
    busy = world.reflect(MockReflector(), redis_client=client, request_id="rq-a")
    assert (busy.status, busy.reason) == ("skipped", "already_active")
    holder.release()

    again = world.reflect(MockReflector(), redis_client=client, request_id="rq-a")

    assert again.status == "merged"  # a busy skip is not a finished job


def test_a_copy_of_a_job_that_holds_the_lease_records_nothing(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    running = ReflectionLease(client, world.agent.id, owner="rq-same", ttl_s=30)
    assert running.acquire()

    copy = world.reflect(MockReflector(), redis_client=client, request_id="rq-same")

    assert copy is None
    assert not (world.reflections / "log.jsonl").exists()
    held = client.get(redis_keys.lease(world.agent.id))
    assert held is not None and held.startswith(b"rq-same ")  # the copy left its job's lease
    running.release()


def test_a_copy_that_gets_the_lease_after_its_job_answered_does_nothing(
    world: World, redis_server: RedisForTests, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job answers while its copy waits for the lease: the copy must not run it again."""
    client = redis_server.client
    jobs = world.jobs(MockReflector(), client)
    request = world.request(request_id="rq-same")
    prepared = jobs.prepare(request)
    assert not isinstance(prepared, ReflectionOutcome)
    first = jobs.work(prepared)
    assert first is not None and first.status == "ran"
    real = work._done
    asked: list[str] = []

    def done_after_the_first_look(client: Any, message: Any) -> bool:
        asked.append(message.job_id)
        return False if len(asked) == 1 else real(client, message)

    monkeypatch.setattr(work, "_done", done_after_the_first_look)

    assert jobs.work(prepared) is None
    assert len(asked) >= 2  # it looked again once it held the lease
    outcome = jobs.settle(request, prepared)
    assert outcome is not None and outcome.status == "merged"
    assert len((world.reflections / "log.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_a_redelivered_job_that_already_finished_is_a_no_op(
    world: World, redis_server: RedisForTests
) -> None:
    client = redis_server.client
    jobs = world.jobs(MockReflector(), client)
    request = world.request(request_id="rq-same")
    prepared = jobs.prepare(request)
    assert not isinstance(prepared, ReflectionOutcome)
    assert jobs.work(prepared) is not None
    first = jobs.settle(request, prepared)
    assert first is not None and first.status == "merged"
    world.say("以后一律用 ruff 检查代码")  # something a second run would merge

    assert jobs.work(prepared) is None  # redelivered: the job has its outcome
    assert jobs.settle(request, prepared) is None  # the answer was dropped with the outcome
    assert len((world.reflections / "log.jsonl").read_text().splitlines()) == 1
    assert "ruff" not in world.human()


def _explicit(world: World) -> None:
    store = AgentStore(Layout(world.home))
    agent = store.get(world.agent.id)
    agent.reflection = ReflectionOverrides(merge="explicit")
    store.save(agent)


@pytest.mark.slow
def test_explicit_mode_the_agent_reviews_and_merges_and_git_is_the_judge(world: World) -> None:
    _explicit(world)
    outcome = world.reflect(MockReflector())
    assert outcome.status == "merged"
    assert outcome.message == "The primary agent integrated 1 reflection commit(s)."
    assert "- 我更喜欢用 tabs 缩进" in world.human()
    assert world.git("log", "-1", "--format=%s").startswith("merge(reflection): ")
    assert watermark(world) is not None
    transcripts = list((world.reflections / "integrations").glob("*/messages.jsonl"))
    assert len(transcripts) == 1 and "[reflection integration]" in transcripts[0].read_text()


@pytest.mark.slow
def test_explicit_mode_an_agent_that_only_says_it_merged_has_not(world: World) -> None:
    _explicit(world)
    outcome = world.reflect(
        MockReflector(),
        agent_provider=ScriptedProvider([text_reply("Done, I merged it.")]),
    )
    assert (outcome.status, outcome.reason) == ("failed", "integration")
    assert outcome.message == (
        "the agent did not merge the proposal; the transcript can be retried."
    )
    assert "tabs" not in world.human()
    assert watermark(world) is None


@pytest.mark.slow
def test_a_manual_reflection_over_recent_conversations_uses_a_manifest(world: World) -> None:
    agents = Agents(Layout(world.home), clock=world.clock)
    other = agents.new_conversation(world.agent)
    other.append(
        [
            other.new_message(role="user", content="总是用中文回答我"),
            other.new_message(role="assistant", content="好的"),
        ]
    )
    record_turn(other.directory, 1)
    agents.close()
    request = ReflectionRequest(
        request_id="rq-multi",
        agent_id=world.agent.id,
        recent=2,
        trigger="manual",
        requested_at=world.clock(),
    )

    outcome = world.jobs(MockReflector()).reflect(request)

    assert outcome.status == "merged"
    human = world.human()
    assert "- 我更喜欢用 tabs 缩进" in human and "- 总是用中文回答我" in human
    manifests = [json.loads(p.read_text()) for p in (world.reflections / "payloads").glob("*.json")]
    assert any(
        isinstance(m, dict) and m.get("type") == "multi_transcript_reflection_payload"
        for m in manifests
    )
    assert load_state(other.directory).watermark is not None
    assert watermark(world) is not None


def test_without_bubblewrap_a_job_fails_saying_how_to_fix_it_and_the_worker_keeps_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, "sandbox off: bwrap is missing"))
    head = world.git("rev-parse", "HEAD")

    outcome = world.reflect(MockReflector())

    assert (outcome.status, outcome.reason) == ("failed", "sandbox_unavailable")
    assert "apt-get install bubblewrap" in outcome.message
    assert "AGENTD_UNSANDBOXED_BASH=1" in outcome.message
    assert world.git("rev-parse", "HEAD") == head
    assert watermark(world) is None
    assert not list((Settings().worker_dir / "jobs").glob("*"))
    assert not list((world.reflections / "worktrees").glob("*"))


def test_without_bubblewrap_a_host_that_allows_bare_bash_still_reflects(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, "sandbox off: bwrap is missing"))
    monkeypatch.setenv("AGENTD_UNSANDBOXED_BASH", "1")

    outcome = world.reflect(MockReflector())

    assert outcome.status == "merged"
    assert "pnpm" in world.human()
