"""The OpenAI-compatible endpoint in front of a real litellm model (the local OpenAI-
compatible server, streaming over HTTP): text relayed while the model still writes, a
client that hangs up mid-stream cancelling the turn as Ctrl-C does, and a provider's
failure before and after the first piece of text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion, error_body
from tests.support.sdk import LazyModule
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:
    openai = LazyModule("openai")

pytestmark = [pytest.mark.slow, pytest.mark.sdk]


@dataclass
class Setup:
    daemon: DaemonRunner
    server: FakeOpenAIServer
    client: openai.OpenAI

    def log(self, conversation: str) -> list[dict[str, Any]]:
        params = {"agent": "ada", "conversation": conversation, "limit": 100, "order": "asc"}
        return self.daemon.result("messages.list", params)["messages"]


@pytest.fixture
def setup(daemon: DaemonRunner) -> Iterator[Setup]:
    with FakeOpenAIServer() as server:
        daemon.start(
            web="127.0.0.1:0",
            model="openai/test-model",
            api_base=server.url,
            api_key="sk-test",
            context_window=32000,
            block_remote_models=True,
        )
        base_url = daemon.daemon.web.api_base  # type: ignore[union-attr]
        daemon.result("agent.create", {"name": "ada"})
        key = daemon.result("apikey.create", {"name": "tests"})["key"]
        client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
        yield Setup(daemon, server, client)
        client.close()


def _ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_pieces_reach_the_client_while_the_model_still_writes(setup: Setup) -> None:
    setup.server.enqueue(
        body=chat_completion("Hello from the model."),
        chunks=["Hello", " from", " the model."],
        hang_after=2,
    )
    with setup.client.chat.completions.with_streaming_response.create(
        model="ada", messages=_ask("hi"), stream=True
    ) as raw:
        conversation = raw.headers["X-Agentd-Conversation"]
        chunks = raw.parse()
        pieces: list[str] = []
        for chunk in chunks:
            text = chunk.choices[0].delta.content if chunk.choices else None
            if text:
                pieces.append(text)
            if "".join(pieces) == "Hello from":
                assert setup.server.holding.is_set(), "the model has not finished writing"
                setup.server.release()

    assert "".join(pieces) == "Hello from the model."
    replies = [m for m in setup.log(conversation) if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == ["Hello from the model."]


def test_a_client_that_hangs_up_mid_stream_cancels_the_turn_keeping_what_arrived(
    setup: Setup,
) -> None:
    setup.server.enqueue(
        body=chat_completion("The first half and the rest"),
        chunks=["The first half", " and the rest"],
        hang_after=1,
    )
    with setup.client.chat.completions.with_streaming_response.create(
        model="ada", messages=_ask("tell me"), stream=True
    ) as raw:
        conversation = raw.headers["X-Agentd-Conversation"]
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                assert chunk.choices[0].delta.content == "The first half"
                break  # leaving the block closes the connection

    def stopped() -> bool:
        return setup.log(conversation)[-1]["kind"] == "stop"

    wait_for(stopped, "the turn's stop record")
    log = setup.log(conversation)
    assert [(m["role"], m["kind"], m.get("stop_reason")) for m in log] == [
        ("user", "message", None),
        ("assistant", "message", "cancelled"),
        ("assistant", "stop", "cancelled"),
    ]
    assert log[1]["content"] == "The first half"
    wait_for(lambda: setup.server.disconnects == 1, "the model's stream closed by the cancel")


def test_a_provider_failure_before_any_text_is_an_http_error_not_retried_by_the_sdk(
    setup: Setup,
) -> None:
    setup.server.enqueue(status=401, body=error_body("Incorrect API key provided"))
    retrying = setup.client.with_options(max_retries=2)

    with pytest.raises(openai.APIStatusError) as caught:
        retrying.chat.completions.create(model="ada", messages=_ask("hi"), stream=True)

    assert caught.value.status_code == 502
    assert caught.value.code == "provider_auth"
    assert caught.value.body["type"] == "server_error"  # type: ignore[index]
    assert len(setup.server.requests) == 1, "x-should-retry: false kept the SDK from retrying"


def test_a_provider_failure_mid_stream_ends_the_stream_with_an_error_the_sdk_raises(
    setup: Setup,
) -> None:
    setup.server.enqueue(
        body=chat_completion("one two three"), chunks=["one", " two", " three"], drop_after=1
    )
    pieces: list[str] = []

    with pytest.raises(openai.APIError) as caught:
        for chunk in setup.client.chat.completions.create(
            model="ada", messages=_ask("count"), stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)

    assert pieces == ["one"]
    assert "connection broke off" in caught.value.message
