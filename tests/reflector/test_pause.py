"""Reflection never stops quietly: a provider's one-off refusal is retried after a backoff,
and only an error the user must fix (unknown model, bad key) pauses the agent — with the
reason and the way out, and only until the setup changes. The reflector's model calls go
through litellm to a local OpenAI-compatible server, as a real provider's would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from reflector.tasks import Reflect
from shared.coordination.broker import locate
from shared.providers.credentials import ProviderKeys
from shared.providers.litellm_provider import LiteLLMProvider
from shared.providers.mock_reflector import MockReflector
from shared.reflection.backoff import load_backoff
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout
from tests.reflector.conftest import READ, World, watermark
from tests.support.openai_server import FakeOpenAIServer, chat_completion, error_body, tool_call

pytestmark = [pytest.mark.slow, pytest.mark.sdk]  # model checks import litellm

MODEL = "openai/reflector-model"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


async def _no_wait(_seconds: float) -> None:
    return None


def _reflector(server: FakeOpenAIServer) -> LiteLLMProvider:
    return LiteLLMProvider(
        model=MODEL,
        api_base=server.url,
        api_key="sk-test",
        context_window=32_000,
        block_remote=True,
        sleep=_no_wait,
    )


def _reads_the_payload(server: FakeOpenAIServer) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", READ)]))


def test_a_providers_one_off_400_at_the_last_step_backs_off_and_the_next_run_reflects(
    world: World, server: FakeOpenAIServer
) -> None:
    _reads_the_payload(server)
    server.enqueue(status=400, body=error_body("Invalid 'messages[3]': unexpected field"))

    failed = world.reflect(_reflector(server))

    assert (failed.status, failed.reason) == ("failed", "provider_http")
    assert "HTTP 400" in failed.message and MODEL in failed.message
    state = load_backoff(world.reflections)
    assert state.pause is None
    assert state.delay_s == 60
    deferred = world.reflect(MockReflector())
    assert (deferred.status, deferred.reason) == ("skipped", "retry_backoff")

    world.clock.now += timedelta(seconds=60)
    _reads_the_payload(server)
    server.enqueue(body=chat_completion("Nothing in it is worth keeping; no commit."))
    again = world.reflect(_reflector(server))

    assert again.status == "no_changes"
    assert watermark(world) == list(world.conversation.log)[-1].id
    assert load_backoff(world.reflections).retry_at is None


def test_an_unknown_model_pauses_automatic_runs_saying_why_and_how_to_resume(
    world: World, server: FakeOpenAIServer
) -> None:
    server.enqueue(
        status=404,
        body=error_body("The model `reflector-model` does not exist", code="model_not_found"),
    )

    failed = world.reflect(_reflector(server))

    assert (failed.status, failed.reason) == ("failed", "provider_config")
    pause = load_backoff(world.reflections).pause
    assert pause is not None and pause.reason == "provider_config"
    assert MODEL in pause.message and "does not exist" in pause.message
    world.clock.now += timedelta(hours=1)  # long past any backoff: the pause is no delay
    paused = world.reflect(MockReflector())
    assert (paused.status, paused.reason) == ("skipped", "configuration_error")
    assert paused.message.startswith("Automatic reflection of ada is paused (provider_config)")
    assert "does not exist" in paused.message
    assert "`agentctl reflect --agent ada` retries now" in paused.message
    assert watermark(world) is None


def test_a_pause_lifts_by_itself_once_the_model_setup_changes(
    world: World, server: FakeOpenAIServer
) -> None:
    server.enqueue(status=404, body=error_body("model 'reflector-model' not found"))
    assert world.reflect(_reflector(server)).reason == "provider_config"
    assert world.reflect(MockReflector()).reason == "configuration_error"

    store = AgentStore(Layout(world.home))
    agent = store.get(world.agent.id)
    store.save(agent.model_copy(update={"model": "openai/another-model"}))
    resumed = world.reflect(MockReflector())

    assert resumed.status == "merged"
    assert load_backoff(world.reflections).pause is None


def test_a_manual_run_that_fails_the_same_way_keeps_the_pause_and_one_that_works_lifts_it(
    world: World, server: FakeOpenAIServer
) -> None:
    server.enqueue(status=401, body=error_body("Incorrect API key provided"))
    assert world.reflect(_reflector(server)).reason == "provider_auth"
    server.enqueue(status=401, body=error_body("Incorrect API key provided"))

    manual = world.reflect(_reflector(server), trigger="manual")

    assert (manual.status, manual.reason) == ("failed", "provider_auth")
    assert world.reflect(MockReflector()).reason == "configuration_error"
    assert world.reflect(MockReflector(), trigger="manual").status == "merged"
    assert load_backoff(world.reflections).pause is None
    assert world.reflect(MockReflector()).reason == "no_payload"


def test_a_workers_model_setup_changes_with_its_keys_model_and_api_base(
    world: World, agentd_home: Path
) -> None:
    """The model and window come with the job (the agent's); the api base and the keys are
    the worker host's own."""
    settings = Settings(home=agentd_home)

    def setup(
        keys: dict[str, str], model: str = MODEL, window: int = 32_000, **changes: object
    ) -> str:
        changed = settings.model_copy(update=changes)
        return Reflect(changed, locate(changed), ProviderKeys(keys)).setup_for(model, window)

    before = setup({"OPENAI_API_KEY": "sk-wrong"})

    assert setup({"OPENAI_API_KEY": "sk-wrong"}) == before
    assert setup({"OPENAI_API_KEY": "sk-right"}) != before
    assert setup({"OPENAI_API_KEY": "sk-wrong"}, api_base="http://127.0.0.1:1/v1") != before
    assert setup({"OPENAI_API_KEY": "sk-wrong"}, model="openai/other") != before
    assert setup({"OPENAI_API_KEY": "sk-wrong"}, window=16_000) != before
    assert "sk-wrong" not in before


def test_a_pause_the_previous_version_wrote_is_dropped_so_the_next_run_checks_again(
    world: World,
) -> None:
    """v1 paused on a bare code, for a provider's one-off 400 too, and never lifted."""
    world.reflections.mkdir(parents=True, exist_ok=True)
    v1 = {"retry_at": None, "delay_s": 60.0, "configuration_error": "provider_config"}
    (world.reflections / "backoff.json").write_text(json.dumps(v1))

    state = load_backoff(world.reflections)

    assert (state.schema_version, state.pause, state.delay_s) == (2, None, 60.0)
    assert world.reflect(MockReflector()).status == "merged"
