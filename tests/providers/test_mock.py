"""The mock model: deterministic answers, usage, and a provider's refusal over its window."""

from __future__ import annotations

import asyncio
import json

import pytest

from shared.errors import ContextOverflowError
from shared.memory.compile import compile_system_prompt
from shared.models.messages import Message
from shared.providers.base import ModelRequest, RequestPurpose, ToolSchema
from shared.providers.mock import MockProvider

HUMAN = "---\nname: human\ndescription: What I know about the user.\n---\n- 我更喜欢用 tabs 缩进\n"


def _ask(text: str, *, human: str = HUMAN, window: int = 128_000, kind: str = "message") -> str:
    system = compile_system_prompt("base", {"system/human.md": human}, "/m")
    request = ModelRequest(
        system=system,
        messages=[
            Message.of(
                id="1", agent_id="a", conversation_id="c", role="user", content=text, kind=kind
            )
        ],  # type: ignore[arg-type]
    )
    return asyncio.run(MockProvider(context_window=window).complete(request)).text


def test_the_mock_echoes_what_it_heard() -> None:
    assert _ask("我更喜欢用 tabs 缩进") == "（mock）我听到了：我更喜欢用 tabs 缩进"


@pytest.mark.parametrize(
    "question", ["你知道我什么？", "你知道我什么", "What do you know about me?"]
)
def test_asked_about_the_user_it_lists_human_md_bullets(question: str) -> None:
    answer = _ask(question)
    assert answer.splitlines()[1:] == ["- 我更喜欢用 tabs 缩进"]
    if question.startswith("你"):
        assert answer.startswith("我记得关于你的这些：\n")


def test_with_an_empty_human_file_it_says_it_knows_nothing() -> None:
    assert (
        _ask("你知道我什么？", human="---\nname: human\ndescription: d\n---\n") == "我还不了解你。"
    )


def test_reminders_are_not_taken_for_user_speech() -> None:
    assert _ask("<memory_update>x</memory_update>", kind="reminder") == "（mock）我听到了："


def test_usage_is_reported_from_estimates() -> None:
    request = ModelRequest(
        system="s" * 400,
        messages=[Message.of(id="1", agent_id="a", conversation_id="c", role="user", content="hi")],
    )
    response = asyncio.run(MockProvider().complete(request))
    assert response.usage.input_tokens == 101
    assert response.usage.output_tokens > 0


def test_a_request_over_the_window_is_refused_like_a_real_provider() -> None:
    with pytest.raises(ContextOverflowError, match="context window is 50"):
        _ask("x" * 1000, window=50)


def _recall_request(*messages: Message, offer: bool = True) -> ModelRequest:
    from shared.agent.tools.recall import RecallSearch

    return ModelRequest(
        system="s", messages=list(messages), tools=[RecallSearch.schema] if offer else []
    )


def _user(text: str) -> Message:
    return Message.of(id="u", agent_id="a", conversation_id="c", role="user", content=text)


@pytest.mark.parametrize(
    ("question", "query"),
    [("还记得数据库端口吗？", "数据库端口"), ("Do you remember the deploy key?", "the deploy key")],
)
def test_asked_to_remember_it_searches_recall_for_the_topic(question: str, query: str) -> None:
    response = asyncio.run(MockProvider().complete(_recall_request(_user(question))))
    (call,) = response.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("recall_search", {"query": query})


def test_without_the_recall_tool_it_just_answers() -> None:
    response = asyncio.run(
        MockProvider().complete(_recall_request(_user("还记得端口吗？"), offer=False))
    )
    assert response.tool_calls == [] and response.text == "（mock）我听到了：还记得端口吗？"


def test_it_answers_with_the_first_hit_that_is_not_the_question_or_a_search() -> None:
    result = Message.of(
        id="t",
        agent_id="a",
        conversation_id="c",
        role="tool",
        name="recall_search",
        tool_call_id="c1",
        content="[2026-01-01T00:00:00.000Z · c · user] 还记得端口吗？ (id m3)\n"
        '[2026-01-01T00:00:00.000Z · c · assistant] recall_search {"query": "端口"} (id m4)\n'
        "[2026-01-01T00:00:00.000Z · c · user] 端口是 5433 (id m1)",
    )
    response = asyncio.run(
        MockProvider().complete(_recall_request(_user("还记得端口吗？"), result))
    )
    assert response.text == "我在过去的对话里找到了：端口是 5433"


def test_a_summary_is_asked_for_by_purpose_whatever_the_prompt_says() -> None:
    transcript = "[user] 第 1 个无关话题：今天天气不错。\n[assistant] （mock）我听到了：第 1 个"
    request = ModelRequest(purpose="summary", system="Summarise.", messages=[_user(transcript)])

    response = asyncio.run(MockProvider().complete(request))

    assert response.text == "[user] 第 1 个无关话题：今天\n[assistant] （mock）我听到了：第"


MERGE_TASK = "[reflection integration] Review the proposal, then merge it or decline it."


MERGE = ToolSchema(name="merge_proposal", description="Merge.", parameters={"type": "object"})
BASH = ToolSchema(name="bash", description="Run a command.", parameters={"type": "object"})


def _integration(
    *messages: Message, purpose: RequestPurpose, tools: list[ToolSchema] | None = None
) -> ModelRequest:
    offered = [BASH, MERGE] if tools is None else tools
    return ModelRequest(system="s", messages=list(messages), tools=offered, purpose=purpose)


def _merge_result(call_id: str, content: str, *, is_error: bool = False) -> Message:
    return Message.of(
        id="t",
        agent_id="a",
        conversation_id="c",
        role="tool",
        tool_call_id=call_id,
        name="merge_proposal",
        content=content,
        is_error=is_error,
    )


def test_in_an_integration_turn_it_merges_with_the_tool_offered_and_reports() -> None:
    mock = MockProvider()
    first = asyncio.run(mock.complete(_integration(_user(MERGE_TASK), purpose="integration")))
    (call,) = first.tool_calls
    assert call.name == "merge_proposal"
    assert json.loads(call.arguments) == {"summary": "accept the reflection's proposal"}
    merged = _merge_result(call.id, "Merged into your memory (now at 0123456789ab).")
    report = asyncio.run(
        mock.complete(_integration(_user(MERGE_TASK), merged, purpose="integration"))
    )
    assert report.text == "（mock）Reviewed the reflection's proposal and merged it into my memory."


def test_an_integration_whose_merge_is_refused_reports_the_refusal() -> None:
    refused = _merge_result("c1", "not merged: conflicts in system/human.md", is_error=True)
    report = asyncio.run(
        MockProvider().complete(_integration(_user(MERGE_TASK), refused, purpose="integration"))
    )
    assert report.text == "（mock）The merge failed: not merged: conflicts in system/human.md"


def test_an_integration_without_the_merge_tool_merges_nothing() -> None:
    request = _integration(_user(MERGE_TASK), purpose="integration", tools=[BASH])
    response = asyncio.run(MockProvider().complete(request))
    assert response.tool_calls == []
    assert response.text == "（mock）I was offered no merge_proposal tool, so I merged nothing."


def test_the_same_text_in_a_conversation_is_only_heard() -> None:
    response = asyncio.run(
        MockProvider().complete(_integration(_user(MERGE_TASK), purpose="conversation"))
    )
    assert response.tool_calls == [] and response.text == f"（mock）我听到了：{MERGE_TASK}"


def _bash_result(content: str, *, is_error: bool = False) -> Message:
    return Message.of(
        id="t",
        agent_id="a",
        conversation_id="c",
        role="tool",
        tool_call_id="c1",
        name="bash",
        content=content,
        is_error=is_error,
    )


@pytest.mark.parametrize(
    ("said", "command"),
    [("run `echo hello | tee note.txt`", "echo hello | tee note.txt"), ("运行 `ls -a`。", "ls -a")],
)
def test_asked_to_run_a_command_it_calls_bash_with_it(said: str, command: str) -> None:
    request = ModelRequest(system="s", messages=[_user(said)], tools=[BASH])
    (call,) = asyncio.run(MockProvider().complete(request)).tool_calls
    assert (call.name, json.loads(call.arguments)) == ("bash", {"command": command})


def test_without_bash_or_backquotes_it_just_answers() -> None:
    unoffered = ModelRequest(system="s", messages=[_user("run `ls`")], tools=[])
    unquoted = ModelRequest(system="s", messages=[_user("run ls")], tools=[BASH])
    for request in (unoffered, unquoted):
        response = asyncio.run(MockProvider().complete(request))
        assert response.tool_calls == [] and response.text.startswith("（mock）我听到了：")


def test_it_reports_what_the_command_printed_or_why_it_did_not_run() -> None:
    def after(result: Message) -> str:
        request = ModelRequest(system="s", messages=[_user("run `x`"), result], tools=[BASH])
        return asyncio.run(MockProvider().complete(request)).text

    assert after(_bash_result("hello\n")) == "The command printed: hello"
    assert after(_bash_result("")) == "The command printed nothing."
    denied = _bash_result("the user denied this call: not now", is_error=True)
    assert after(denied) == "The command did not run: the user denied this call: not now"
