"""LiteLLMProvider streaming over real HTTP (litellm → openai SDK → httpx) from the local
fake server: the text handed on piece by piece as the server sends it, the same complete
response at the end, and what a stream that hangs or breaks off does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.errors import ProviderHTTPError, ProviderTimeout
from shared.models.messages import Message
from shared.providers.base import ModelRequest
from shared.providers.litellm_provider import LiteLLMProvider
from shared.providers.streaming import text_streamed_to
from tests.support.openai_server import (
    FakeOpenAIServer,
    chat_completion,
    error_body,
    tool_call,
    usage,
)

pytestmark = [pytest.mark.slow, pytest.mark.sdk]  # imports litellm

MODEL = "openai/test-model"


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_provider(server: FakeOpenAIServer, sleeps: Sleeps, **overrides: Any) -> LiteLLMProvider:
    options: dict[str, Any] = {
        "model": MODEL,
        "api_base": server.url,
        "api_key": "sk-test",
        "context_window": 8192,
        "timeout_s": 5.0,
        "attempts": 4,
        "block_remote": True,
        "sleep": sleeps,
    }
    return LiteLLMProvider(**(options | overrides))


def ask() -> ModelRequest:
    message = Message.of(
        id="msg-x", agent_id="agent-1", conversation_id="conv-1", role="user", content="hi"
    )
    return ModelRequest(system="You are terse.", messages=[message])


class Pieces(list[str]):
    """The listener: each piece as it came."""

    async def __call__(self, text: str) -> None:
        self.append(text)

    @property
    def texts(self) -> list[str]:
        return list(self)


async def streamed(provider: LiteLLMProvider, pieces: Pieces) -> Any:
    with text_streamed_to(pieces):
        return await provider.complete(ask())


def test_text_is_handed_on_as_the_server_sends_it_and_the_response_is_whole(
    openai_server: FakeOpenAIServer,
) -> None:
    provider = make_provider(openai_server, Sleeps())
    openai_server.enqueue(
        body=chat_completion("hello there, friend", usage=usage(12, 3)),
        chunks=["hello", " there,", " friend"],
    )
    pieces = Pieces()

    response = asyncio.run(streamed(provider, pieces))

    assert pieces.texts == ["hello", " there,", " friend"]
    assert response.text == "hello there, friend"
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    sent = openai_server.requests[0]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_streamed_tool_calls_come_back_whole_with_the_text_before_them(
    openai_server: FakeOpenAIServer,
) -> None:
    provider = make_provider(openai_server, Sleeps())
    openai_server.enqueue(
        body=chat_completion(
            "Let me look.",
            tool_calls=[
                tool_call("bash", '{"cmd": "ls -a"}', id="call-a"),
                tool_call("read", '{"path": "x"}', id="call-b"),
            ],
            usage=usage(20, 9),
        )
    )
    pieces = Pieces()

    response = asyncio.run(streamed(provider, pieces))

    assert "".join(pieces.texts) == "Let me look."
    assert response.text == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call-a", "bash", '{"cmd": "ls -a"}'),
        ("call-b", "read", '{"path": "x"}'),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage.output_tokens == 9


def test_without_a_listener_the_call_does_not_stream(openai_server: FakeOpenAIServer) -> None:
    provider = make_provider(openai_server, Sleeps())
    openai_server.enqueue(body=chat_completion("whole"))

    response = asyncio.run(provider.complete(ask()))

    assert response.text == "whole"
    assert "stream" not in openai_server.requests[0]


def test_a_failure_before_any_text_is_retried_and_the_retry_streams(
    openai_server: FakeOpenAIServer,
) -> None:
    sleeps = Sleeps()
    provider = make_provider(openai_server, sleeps)
    openai_server.enqueue(status=503, body=error_body("overloaded", type="server_error"))
    openai_server.enqueue(body=chat_completion("second try"))
    pieces = Pieces()

    response = asyncio.run(streamed(provider, pieces))

    assert response.text == "second try"
    assert "".join(pieces.texts) == "second try"
    assert len(sleeps) == 1
    assert len(openai_server.requests) == 2


def test_a_stream_that_breaks_off_after_text_is_not_retried(
    openai_server: FakeOpenAIServer,
) -> None:
    sleeps = Sleeps()
    provider = make_provider(openai_server, sleeps)
    openai_server.enqueue(
        body=chat_completion("one two three four"), chunks=["one", " two", " three"], drop_after=2
    )
    openai_server.enqueue(body=chat_completion("a retry would say this"))
    pieces = Pieces()

    with pytest.raises(ProviderHTTPError, match="connection broke off"):
        asyncio.run(streamed(provider, pieces))

    assert pieces.texts == ["one", " two"]
    assert sleeps == []
    assert len(openai_server.requests) == 1


def test_a_stream_that_breaks_off_before_any_text_is_retried(
    openai_server: FakeOpenAIServer,
) -> None:
    sleeps = Sleeps()
    provider = make_provider(openai_server, sleeps)
    openai_server.enqueue(body=chat_completion("lost"), drop_after=0)
    openai_server.enqueue(body=chat_completion("found"))
    pieces = Pieces()

    response = asyncio.run(streamed(provider, pieces))

    assert response.text == "found"
    assert pieces.texts == ["found"]
    assert len(sleeps) == 1


@pytest.mark.parametrize("hang_after", [0, 1], ids=["before-the-first-token", "mid-stream"])
def test_a_hung_stream_ends_at_the_timeout_as_provider_timeout(
    openai_server: FakeOpenAIServer, hang_after: int
) -> None:
    provider = make_provider(openai_server, Sleeps(), timeout_s=0.5)
    openai_server.enqueue(
        body=chat_completion("never finished"), chunks=["never", " finished"], hang_after=hang_after
    )
    pieces = Pieces()

    with pytest.raises(ProviderTimeout) as caught:
        asyncio.run(streamed(provider, pieces))

    # What came before the hang was handed on while the server still held the stream.
    assert pieces.texts == ["never"][:hang_after]
    assert "sent nothing for 0.5 s" in caught.value.message
    assert len(openai_server.requests) == 1
