"""recall_search and messages_around: what the model is shown, and bad arguments."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from shared.agent.tools.base import ToolContext
from shared.agent.tools.recall import MessagesAround, RecallSearch
from shared.errors import ToolError, UnknownMessage
from shared.models.messages import Message, ToolCall
from shared.recall.ranking import Found, Hit, SearchRequest

WHEN = datetime(2026, 10, 8, 16, 0, 49, 789000, tzinfo=UTC)


class FakeRecall:
    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.requests: list[SearchRequest] = []
        self.windows: list[tuple[int, int]] = []

    async def search(self, request: SearchRequest) -> Found:
        self.requests.append(request)
        return Found(self.hits)

    async def around(self, message_id: str, before: int, after: int) -> list[Message]:
        self.windows.append((before, after))
        if message_id != "m2":
            raise UnknownMessage(f"no message {message_id}")
        call = ToolCall(id="x", name="bash", arguments='{"command": "ls"}')
        return [
            Message.of(
                id="m1",
                agent_id="a",
                conversation_id="c",
                role="user",
                content="hi",
                created_at=WHEN,
            ),
            Message.of(
                id="m2",
                agent_id="a",
                conversation_id="c",
                role="assistant",
                tool_calls=[call],
                created_at=WHEN,
            ),
        ][: before + after + 1]


def _run(tool: RecallSearch | MessagesAround, args: dict[str, object], ctx: ToolContext) -> str:
    return asyncio.run(tool.run(args, ctx))


def test_hits_are_listed_with_time_conversation_role_text_and_id(ctx: ToolContext) -> None:
    recall = FakeRecall(
        [
            Hit(
                "m1",
                "conv-1",
                "user",
                WHEN.timestamp(),
                3.4,
                "我们的数据库端口是 5433，\n别用默认的 5432",
            )
        ]
    )
    context = replace(ctx, recall=recall, conversation_id="conv-2")

    text = _run(RecallSearch(), {"query": "数据库端口"}, context)

    assert text == (
        "[2026-10-08T16:00:49.789Z · conv-1 · user] "
        "我们的数据库端口是 5433， 别用默认的 5432 (id m1)"
    )
    (request,) = recall.requests
    assert (request.query, request.limit, request.current_conversation_id) == (
        "数据库端口",
        5,
        "conv-2",
    )


def test_no_hits_says_so(ctx: ToolContext) -> None:
    context = replace(ctx, recall=FakeRecall([]))
    assert _run(RecallSearch(), {"query": "nothing"}, context) == "no past messages match 'nothing'"


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"query": ""},
        {"query": 5},
        {"query": "x", "limit": "3"},
        {"query": "x", "conversation": 7},
    ],
)
def test_bad_search_arguments_are_tool_errors(ctx: ToolContext, args: dict[str, object]) -> None:
    with pytest.raises(ToolError):
        _run(RecallSearch(), args, replace(ctx, recall=FakeRecall([])))


def test_limits_out_of_range_are_brought_into_range_rather_than_refused(ctx: ToolContext) -> None:
    recall = FakeRecall([])
    ctx_recall = replace(ctx, recall=recall)
    _run(RecallSearch(), {"query": "x", "limit": 500}, ctx_recall)
    _run(RecallSearch(), {"query": "x", "limit": -2}, ctx_recall)
    assert [request.limit for request in recall.requests] == [20, 1]
    for before, after in ((-5, 99), (3, None)):
        _run(MessagesAround(), {"message_id": "m2", "before": before, "after": after}, ctx_recall)
    assert recall.windows == [(0, 20), (3, 5)]


def test_around_marks_the_hit_and_shows_tool_calls(ctx: ToolContext) -> None:
    text = _run(
        MessagesAround(),
        {"message_id": "m2", "before": 1, "after": 0},
        replace(ctx, recall=FakeRecall([])),
    )
    assert text.splitlines() == [
        "[2026-10-08T16:00:49.789Z · c · user] hi",
        '[2026-10-08T16:00:49.789Z · c · assistant] → bash({"command": "ls"}) ◀',
    ]


def test_around_an_unknown_id_is_a_tool_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="no message m9"):
        _run(MessagesAround(), {"message_id": "m9"}, replace(ctx, recall=FakeRecall([])))
