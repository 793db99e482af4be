"""Compaction: before the provider refuses, never splitting a tool call from its results,
never rewriting the log, and a clear error when nothing more can be done."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shared.agent.loop import Turn, run_turn
from shared.agent.tools.args import ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.context.compaction import plan_cut
from shared.errors import ContextOverflowError
from shared.ids import new_id
from shared.models.messages import Message, ToolCall
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.mock import MockProvider
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.providers.tokens import request_tokens
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner

FILLER = "今天天气不错。" * 12


def _filler(n: int) -> str:
    return f"第 {n} 个无关话题：{FILLER}"


def _log(home: Path) -> list[dict[str, Any]]:
    (path,) = home.glob("agents/*/conversations/*/messages.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _compactions(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["data"] for line in lines if line.get("event") == "compaction"]


def test_the_seed_run_compacts_by_context_pressure_alone_and_loses_nothing(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start(context_window=1200)
    compactions: list[dict[str, Any]] = []
    log_before = b""
    for n in range(1, 18):
        lines = daemon.call("chat", {"text": _filler(n)})
        assert lines[-1]["result"]["stop_reason"] == "end_turn"
        compactions += _compactions(lines)
        (path,) = agentd_home.glob("agents/*/conversations/*/messages.jsonl")
        log_now = path.read_bytes()
        assert log_now.startswith(log_before), "messages.jsonl was rewritten"
        log_before = log_now

    assert len(compactions) >= 3
    assert {c["trigger"] for c in compactions} == {"context_pressure"}
    assert all(c["tokens_before"] > 960 >= c["tokens_after"] for c in compactions)
    users = [m["content"] for m in _log(agentd_home) if m["role"] == "user" and "kind" not in m]
    assert users == [_filler(n) for n in range(1, 18)]
    summaries = [m for m in _log(agentd_home) if m.get("kind") == "summary"]
    assert len(summaries) == len(compactions)
    assert summaries[0]["content"].startswith("[system alert] ")
    assert summaries[0]["metadata"]["summary"].startswith("[user] 第 1 个无关话题：今天\n")
    budget = daemon.result("context.show")
    assert budget["request_tokens"] <= budget["threshold"] == 960
    assert budget["last_compaction"]["trigger"] == "context_pressure"
    # Each compaction's flag was consumed by the post-turn reflection check, which (with
    # Redis down in this test) left the due reflection request on disk.
    (event_file,) = agentd_home.glob("agents/*/conversations/*/compaction-event.json")
    assert json.loads(event_file.read_text())["pending"] is False
    assert list(agentd_home.glob("agents/*/reflections/outbox/*.json"))


class UnderestimatedMock(MockProvider):
    """A provider whose real token count is 30% above our chars/4 estimate."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        real = int(request_tokens(request) * 1.3)
        if real > self.context_window:
            raise ContextOverflowError(f"real size {real} > {self.context_window}")
        return await super().complete(request)


def test_when_the_estimate_is_low_the_provider_overflow_compacts_and_retries(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start(provider=UnderestimatedMock(context_window=1200))
    triggers = []
    for n in range(1, 15):
        lines = daemon.call("chat", {"text": _filler(n)})
        assert lines[-1]["result"]["stop_reason"] == "end_turn"
        triggers += [c["trigger"] for c in _compactions(lines)]
    assert "context_overflow" in triggers
    users = [m["content"] for m in _log(agentd_home) if m["role"] == "user" and "kind" not in m]
    assert users == [_filler(n) for n in range(1, 15)]


def _turn(conversation: Conversation, provider: Any, **fields: Any) -> Turn:
    async def system_prompt() -> str:
        return "You are a test agent."

    return Turn(
        conversation=conversation,
        provider=provider,
        tools=fields.pop("tools", []),
        tool_context=ToolContext(agent_id="a", workspace=Path("/tmp"), memory_dir=Path("/tmp")),
        system_prompt=system_prompt,
        **fields,
    )


def _user(conversation: Conversation, text: str) -> Message:
    return Message.of(
        id=new_id("msg"), agent_id="a", conversation_id=conversation.id, role="user", content=text
    )


def test_a_second_overflow_stops_the_turn_with_a_clear_error_and_nothing_lost(
    tmp_path: Path,
) -> None:
    conversation = Conversation.create(Layout(tmp_path), "a", memory_head=None)
    conversation.append([_user(conversation, _filler(n)) for n in range(6)])
    refusal = ContextOverflowError("the provider says the request is too long")
    provider = ScriptedProvider([refusal, refusal], context_window=100_000)
    turn = _turn(conversation, provider, summariser=MockProvider())

    result = asyncio.run(run_turn(turn, [_user(conversation, "the question")]))

    assert result.stop_reason == "error"
    assert result.error is not None and result.error["code"] == "context_overflow"
    assert "compacted as far as it goes" in result.error["message"]
    assert "agentctl conversations new" in result.error["message"]
    logged = [m.content for m in conversation.log if m.kind == "message"]
    assert logged == [_filler(n) for n in range(6)] + ["the question"]


def test_a_floor_over_the_threshold_is_refused_before_any_model_call(
    daemon: DaemonRunner,
) -> None:
    provider = ScriptedProvider(context_window=600)
    daemon.start(provider=provider)
    reply = daemon.result("chat", {"text": "hello"})
    assert reply["stop_reason"] == "error"
    assert reply["error"]["code"] == "prompt_floor"
    assert "480 usable" in reply["error"]["message"]
    assert provider.requests == []


class Shout(Tool):
    name = "shout"
    description = "Returns a long text."
    Args = ToolArgs

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> str:
        return "回声" * 150


def test_a_compaction_mid_turn_never_separates_a_tool_call_from_its_result(
    tmp_path: Path,
) -> None:
    conversation = Conversation.create(Layout(tmp_path), "a", memory_head=None)
    windows: list[list[Message]] = []

    def call_again(request: ModelRequest) -> ModelResponse:
        windows.append(list(conversation.context))
        return tool_reply(("shout", "{}"), ("shout", "{}"))

    provider = ScriptedProvider([call_again] * 7 + [text_reply("done")], context_window=1_000)
    turn = _turn(conversation, provider, tools=[Shout()], summariser=MockProvider())

    result = asyncio.run(run_turn(turn, [_user(conversation, "shout a lot")]))

    assert result.stop_reason == "end_turn"
    assert any(w[0].kind == "summary" for w in windows), "no compaction happened"
    for window in windows:
        calls = {c.id for m in window if m.role == "assistant" for c in m.tool_calls}
        assert all(m.tool_call_id in calls for m in window if m.role == "tool")


# --- plan_cut, on any window -------------------------------------------------------------


@st.composite
def windows(draw: st.DrawFn) -> list[Message]:
    """Windows as the loop makes them: user turns, assistant replies, tool results right
    after the assistant message that called them."""
    messages: list[Message] = []
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        text = "x" * draw(st.integers(0, 400))
        if kind == "tools":
            calls = [ToolCall(id=f"c{i}-{j}", name="t") for j in range(draw(st.integers(1, 3)))]
            messages.append(
                Message.of(
                    id=f"a{i}",
                    agent_id="a",
                    conversation_id="c",
                    role="assistant",
                    content=text,
                    tool_calls=calls,
                )
            )
            messages += [
                Message.of(
                    id=f"t{i}-{c.id}",
                    agent_id="a",
                    conversation_id="c",
                    role="tool",
                    tool_call_id=c.id,
                    content=text,
                )
                for c in calls
            ]
        else:
            messages.append(
                Message.of(id=f"m{i}", agent_id="a", conversation_id="c", role=kind, content=text)
            )
    return messages


@given(windows(), st.integers(0, 2_000))
def test_a_cut_never_leaves_a_kept_result_without_its_call(
    window: list[Message], keep_tokens: int
) -> None:
    cut = plan_cut(window, keep_tokens)
    kept = window[cut:]
    calls = {c.id for m in kept if m.role == "assistant" for c in m.tool_calls}
    assert all(m.tool_call_id in calls for m in kept if m.role == "tool")
    assert 0 <= cut <= len(window)


def test_the_newest_message_is_kept_even_when_it_alone_is_over_the_budget() -> None:
    window = [
        Message.of(id=str(i), agent_id="a", conversation_id="c", role="user", content="x" * 400)
        for i in range(3)
    ]
    assert plan_cut(window, keep_tokens=10) == 2
    assert plan_cut(window, keep_tokens=10_000) == 0
