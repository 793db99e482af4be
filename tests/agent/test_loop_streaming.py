"""A turn that streams: each model call announced, the reply's text sent on piece by piece
as the provider hands it over, the log keeping the same complete message; and a reply cut
short by a cancel or a failure kept as far as it came, marked with how the turn stopped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shared.agent.loop import Turn, run_turn
from shared.agent.tools.base import ToolContext
from shared.errors import ProviderHTTPError
from shared.ids import new_id
from shared.models.events import Event
from shared.models.messages import Message
from shared.models.turns import TurnResult
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import MockProvider
from shared.providers.scripted import text_reply
from shared.providers.streaming import text_listener
from shared.store.conversations import Conversation
from shared.store.layout import Layout

Events = list[tuple[str, dict[str, Any]]]


class Writing(Provider):
    """Hands on ``pieces`` one by one, then answers, fails with ``error``, or waits for
    ever (``hang``); ``wrote`` is set once the pieces are out."""

    def __init__(
        self, pieces: list[str], *, error: Exception | None = None, hang: bool = False
    ) -> None:
        self.model = "writing"
        self.context_window = 128_000
        self.pieces = pieces
        self.error = error
        self.hang = hang
        self.wrote = asyncio.Event()
        self.listened: list[bool] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        listener = text_listener()
        self.listened.append(listener is not None)
        for piece in self.pieces:
            if listener is not None:
                await listener(piece)
        self.wrote.set()
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.sleep(3600)
        return text_reply("".join(self.pieces))


@pytest.fixture
def conversation(tmp_path: Path) -> Conversation:
    return Conversation.create(Layout(tmp_path), "agent-1", memory_head=None)


def _turn(conversation: Conversation, provider: Provider, events: Events, stream: bool) -> Turn:
    async def emit(event: Event) -> None:
        events.append((event.name, event.data()))

    async def system_prompt() -> str:
        return "You are a test agent."

    return Turn(
        conversation=conversation,
        provider=provider,
        tools=[],
        tool_context=ToolContext(
            agent_id="agent-1", workspace=Path("/tmp"), memory_dir=Path("/tmp")
        ),
        system_prompt=system_prompt,
        emit=emit,
        stream=stream,
    )


def _user(conversation: Conversation, text: str = "hello") -> Message:
    return Message.of(
        id=new_id("msg"),
        agent_id="agent-1",
        conversation_id=conversation.id,
        role="user",
        content=text,
    )


def _run(
    conversation: Conversation, provider: Provider, events: Events, *, stream: bool = True
) -> TurnResult:
    turn = _turn(conversation, provider, events, stream)
    return asyncio.run(run_turn(turn, [_user(conversation)]))


def test_the_mock_streams_its_answer_in_a_few_pieces_and_the_log_keeps_it_whole(
    conversation: Conversation,
) -> None:
    events: Events = []
    result = _run(conversation, MockProvider(), events)

    names = [name for name, _ in events]
    assert names[0] == "model_call"
    assert events[0][1] == {"model": "mock", "step": 1}
    deltas = [data["text"] for name, data in events if name == "assistant_delta"]
    assert 2 <= len(deltas) <= 3
    assert names[-1] == "assistant"
    whole = events[-1][1]["text"]
    assert "".join(deltas) == whole == "（mock）我听到了：hello"
    replies = [m for m in conversation.log if m.role == "assistant" and m.kind == "message"]
    assert [(m.content, m.stop_reason) for m in replies] == [(whole, "end_turn")]
    assert result.text == whole


def test_a_turn_that_does_not_stream_announces_nothing_and_asks_for_no_stream(
    conversation: Conversation,
) -> None:
    events: Events = []
    provider = Writing(["whole"])
    _run(conversation, provider, events, stream=False)

    assert [name for name, _ in events] == ["assistant"]
    assert provider.listened == [False]


def test_a_turn_cancelled_mid_stream_keeps_what_arrived_marked_cancelled(
    conversation: Conversation, tmp_path: Path
) -> None:
    events: Events = []
    provider = Writing(["The answer ", "is forty"], hang=True)

    async def cancel_mid_stream() -> None:
        turn = _turn(conversation, provider, events, True)
        task = asyncio.create_task(run_turn(turn, [_user(conversation)]))
        await provider.wrote.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_stream())

    log = list(conversation.log)
    assert [(m.role, m.kind) for m in log] == [
        ("user", "message"),
        ("assistant", "message"),
        ("assistant", "stop"),
    ]
    reply, stop = log[1], log[2]
    assert (reply.content, reply.stop_reason) == ("The answer is forty", "cancelled")
    assert stop.stop_reason == "cancelled"
    # The next turn's model reads the reply as far as it came.
    reopened = Conversation.open(Layout(tmp_path), "agent-1", conversation.id)
    assert [m.content for m in reopened.context][-1] == "The answer is forty"


def test_a_stream_that_fails_midway_keeps_what_arrived_and_records_the_error(
    conversation: Conversation,
) -> None:
    events: Events = []
    error = ProviderHTTPError("writing: the connection broke off", status_code=None, model="w")
    result = _run(conversation, Writing(["Half ", "an answer"], error=error), events)

    assert result.stop_reason == "error"
    assert result.error is not None and result.error["code"] == "provider_http"
    log = list(conversation.log)
    assert [(m.role, m.kind, m.stop_reason) for m in log[1:]] == [
        ("assistant", "message", "error"),
        ("assistant", "stop", "error"),
    ]
    assert log[1].content == "Half an answer"
    assert [data["text"] for name, data in events if name == "assistant_delta"] == [
        "Half ",
        "an answer",
    ]


def test_a_failure_before_any_text_adds_no_reply(conversation: Conversation) -> None:
    events: Events = []
    error = ProviderHTTPError("writing: HTTP 503", status_code=503, model="w")
    _run(conversation, Writing([], error=error), events)

    assert [(m.role, m.kind) for m in conversation.log] == [
        ("user", "message"),
        ("assistant", "stop"),
    ]
