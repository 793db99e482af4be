"""The agent loop against scripted providers: continuation, stop reasons, rules, persistence."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shared.agent.loop import Turn, run_turn
from shared.agent.request import NOT_EXECUTED, tool_result_cap
from shared.agent.rules import ToolRules
from shared.agent.tools.args import ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.agent.tools.view import MEMORY, WORKSPACE, PathView
from shared.errors import ContextOverflowError, DiskFull, ProviderHTTPError, ToolError
from shared.ids import new_id
from shared.models.events import Event
from shared.models.messages import Message
from shared.models.turns import TurnResult
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.store.conversations import Conversation
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout
from tests.support.waiting import ceiling


class Echo(Tool):
    name = "echo"
    description = "Echo text."

    class Args(ToolArgs):
        text: str = ""

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        return args.text


class Fail(Tool):
    name = "fail"
    description = "Always fails."
    Args = ToolArgs

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> str:
        raise ToolError("file not found: nowhere.txt")


class Commit(Tool):
    name = "commit"
    description = "Fails as a memory commit does, naming the checkout by its host path."
    Args = ToolArgs

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> str:
        raise ToolError(f"not committed: git commit failed in {ctx.memory_dir}: index.lock")


class Finish(Tool):
    name = "finish"
    description = "Ends the turn."
    Args = ToolArgs

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> str:
        return "done"


class Hang(Tool):
    name = "hang"
    description = "Never returns."
    Args = ToolArgs
    started: asyncio.Event | None = None
    """Set once it runs, for a test that acts while it hangs."""

    async def execute(self, args: ToolArgs, ctx: ToolContext) -> str:
        if self.started is not None:
            self.started.set()
        await asyncio.sleep(3600)
        return "unreachable"


@pytest.fixture
def conversation(tmp_path: Path) -> Conversation:
    return Conversation.create(Layout(tmp_path), "agent-1", memory_head=None)


def _run(
    conversation: Conversation,
    provider: ScriptedProvider,
    text: str = "hello",
    *,
    rules: ToolRules | None = None,
    max_steps: int = 50,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    context: ToolContext | None = None,
) -> TurnResult:
    async def emit(event: Event) -> None:
        if events is not None:
            events.append((event.name, event.data()))

    async def system_prompt() -> str:
        return "You are a test agent."

    turn = Turn(
        conversation=conversation,
        provider=provider,
        tools=[Echo(), Fail(), Commit(), Finish(), Hang()],
        tool_context=context
        or ToolContext(agent_id="agent-1", workspace=Path("/tmp"), memory_dir=Path("/tmp")),
        system_prompt=system_prompt,
        max_steps=max_steps,
        rules=rules or ToolRules(),
        emit=emit,
    )
    user = Message.of(
        id=new_id("msg"),
        agent_id="agent-1",
        conversation_id=conversation.id,
        role="user",
        content=text,
    )
    return asyncio.run(run_turn(turn, [user]))


def _roles(conversation: Conversation) -> list[str]:
    return [m.role if m.kind == "message" else m.kind for m in conversation.log]


def test_a_reply_without_tool_calls_ends_the_turn(conversation: Conversation) -> None:
    result = _run(conversation, ScriptedProvider([text_reply("hi there")]))
    assert (result.stop_reason, result.text, result.steps) == ("end_turn", "hi there", 1)
    assert _roles(conversation) == ["user", "assistant"]
    assert list(conversation.log)[-1].stop_reason == "end_turn"


def test_a_tool_error_names_the_checkout_as_the_model_knows_it(
    conversation: Conversation, tmp_path: Path
) -> None:
    """In bubblewrap the model knows its memory as ``/memory``; a harness error that
    names the host path (git's "failed in …") must not tell it where the home is."""
    memory, workspace = tmp_path / "agents" / "a1" / "memory", tmp_path / "agents" / "a1" / "ws"
    view = PathView.of((WORKSPACE, workspace), (MEMORY, memory), sandboxed=True)
    context = ToolContext(agent_id="agent-1", workspace=workspace, memory_dir=memory, view=view)
    provider = ScriptedProvider([tool_reply(("commit", "{}")), text_reply("ok")])
    _run(conversation, provider, context=context)
    result = next(m for m in conversation.log if m.role == "tool")
    assert result.content == "not committed: git commit failed in /memory: index.lock"


def test_tool_calls_continue_the_turn_until_a_plain_answer(conversation: Conversation) -> None:
    provider = ScriptedProvider(
        [
            tool_reply(("echo", '{"text": "one"}')),
            tool_reply(("echo", '{"text": "two"}'), ("fail", "{}")),
            text_reply("all done"),
        ]
    )
    events: list[tuple[str, dict[str, Any]]] = []

    result = _run(conversation, provider, events=events)

    assert (result.stop_reason, result.steps, result.text) == ("end_turn", 3, "all done")
    assert _roles(conversation) == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    results = [m for m in conversation.log if m.role == "tool"]
    assert [(m.name, m.content, m.is_error) for m in results] == [
        ("echo", "one", False),
        ("echo", "two", False),
        ("fail", "file not found: nowhere.txt", True),
    ]
    assert [e for e, _ in events] == [
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    # The model saw its own earlier calls and their results on the next step.
    second = provider.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool"]


def test_each_step_is_persisted_before_the_next_model_call(conversation: Conversation) -> None:
    seen_on_disk: list[list[str]] = []

    def second_step(request: ModelRequest) -> ModelResponse:
        seen_on_disk.append(
            _roles(
                Conversation.open(
                    Layout(conversation.directory.parents[3]), "agent-1", conversation.id
                )
            )
        )
        return text_reply("ok")

    provider = ScriptedProvider([tool_reply(("echo", '{"text": "x"}')), second_step])
    _run(conversation, provider)
    assert seen_on_disk == [["user", "assistant", "tool"]]


def test_max_steps_stops_a_model_that_never_stops_calling_tools(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider([tool_reply(("echo", "{}")) for _ in range(3)])
    result = _run(conversation, provider, max_steps=3)
    assert (result.stop_reason, result.steps) == ("max_steps", 3)
    last_assistant = [m for m in conversation.log if m.role == "assistant"][-1]
    assert last_assistant.stop_reason == "max_steps"
    assert _roles(conversation)[-1] == "tool"


def test_a_length_finish_without_tools_is_max_tokens(conversation: Conversation) -> None:
    result = _run(conversation, ScriptedProvider([text_reply("cut sh", finish_reason="length")]))
    assert result.stop_reason == "max_tokens"


def test_a_terminal_tool_runs_and_then_ends_the_turn(conversation: Conversation) -> None:
    provider = ScriptedProvider([tool_reply(("finish", "{}"))])
    result = _run(conversation, provider, rules=ToolRules(terminal=frozenset({"finish"})))
    assert result.stop_reason == "tool_rule"
    assert [m.content for m in conversation.log if m.role == "tool"] == ["done"]


def test_a_required_tool_must_be_called_before_the_turn_may_end(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider(
        [
            text_reply("I'm done"),
            tool_reply(("echo", '{"text": "saved"}')),
            text_reply("now I'm done"),
        ]
    )
    result = _run(conversation, provider, rules=ToolRules(required_before_exit=frozenset({"echo"})))
    assert (result.stop_reason, result.steps, result.text) == ("end_turn", 3, "now I'm done")
    note = next(m for m in conversation.log if m.kind == "note")
    assert "echo" in note.content
    assert note in provider.requests[1].messages


def test_a_call_needing_approval_is_not_run_and_stops_the_turn(conversation: Conversation) -> None:
    provider = ScriptedProvider([tool_reply(("echo", '{"text": "x"}')), text_reply("next turn")])
    result = _run(conversation, provider, rules=ToolRules(requires_approval=frozenset({"echo"})))
    assert result.stop_reason == "requires_approval"
    assert not [m for m in conversation.log if m.role == "tool"]
    # The next turn's request answers the dangling call so the provider accepts it.
    _run(conversation, provider, "go on")
    answered = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert [m.content for m in answered] == [NOT_EXECUTED]


def test_unknown_tools_and_bad_arguments_are_errors_the_model_sees(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider(
        [
            tool_reply(("nope", "{}"), ("echo", "{not json"), ("echo", "[1]")),
            text_reply("sorry"),
        ]
    )
    result = _run(conversation, provider)
    assert result.stop_reason == "end_turn"
    errors = [m.content for m in conversation.log if m.role == "tool"]
    assert errors[0].startswith("unknown tool 'nope'; available tools: commit, echo, fail, finish")
    assert errors[1].startswith("could not call echo: arguments are not valid JSON")
    assert errors[2] == "could not call echo: arguments must be a JSON object"


def test_long_tool_results_are_truncated_with_a_marker(conversation: Conversation) -> None:
    cap = tool_result_cap(128_000)
    assert cap == 102_400
    provider = ScriptedProvider(
        [
            tool_reply(("echo", '{"text": "%s"}' % ("x" * (cap + 123)))),
            text_reply("ok"),
        ]
    )
    _run(conversation, provider)
    stored = next(m for m in conversation.log if m.role == "tool").content
    assert stored == "x" * cap + "... [truncated 123 chars]"


@pytest.mark.parametrize(
    ("window", "cap"), [(128_000, 102_400), (8_192, 6_553), (4_000, 5_000), (1_200, 5_000)]
)
def test_tool_result_cap_is_a_fifth_of_the_window_but_at_least_5000_chars(
    window: int, cap: int
) -> None:
    assert tool_result_cap(window) == cap


def test_a_provider_error_stops_the_turn_and_is_recorded(conversation: Conversation) -> None:
    error = ProviderHTTPError(
        "openai/x failed with 503 after 4 attempts", status_code=503, model="openai/x"
    )
    result = _run(conversation, ScriptedProvider([error]))
    assert result.stop_reason == "error"
    assert result.error == {
        "code": "provider_http",
        "message": "openai/x failed with 503 after 4 attempts",
    }
    stop = list(conversation.log)[-1]
    assert (stop.kind, stop.stop_reason) == ("stop", "error")
    assert stop not in conversation.context


class _NearlyFullLog(MessageLog):
    """A log on a disk with ``room`` bytes left: a larger append is refused, as the real
    log refuses one (nothing of it written)."""

    def __init__(self, path: Path, room: int) -> None:
        super().__init__(path)
        self.room = room

    def append(self, messages: Any) -> list[int]:
        messages = list(messages)
        needed = sum(len(m.to_line()) for m in messages)
        if needed > self.room:
            raise DiskFull(self.path, needed=needed, free=self.room)
        self.room -= needed
        return super().append(messages)


def test_a_reply_the_disk_refuses_ends_the_turn_with_disk_full_and_stays_out_of_the_window(
    conversation: Conversation,
) -> None:
    conversation.log = _NearlyFullLog(conversation.log.path, room=2_000)
    result = _run(conversation, ScriptedProvider([text_reply("long " * 1_000)]))

    assert result.stop_reason == "error"
    assert result.error is not None and result.error["code"] == "disk_full"
    assert _roles(conversation) == ["user", "stop"]
    assert [m.role for m in conversation.context] == ["user"]


def test_when_not_even_the_stop_fits_the_turn_raises_disk_full(
    conversation: Conversation,
) -> None:
    conversation.log = _NearlyFullLog(conversation.log.path, room=300)
    with pytest.raises(DiskFull):
        _run(conversation, ScriptedProvider([text_reply("long " * 1_000)]))

    assert _roles(conversation) == ["user"]
    assert [m.role for m in conversation.context] == ["user"]


def test_a_cancelled_turn_stays_cancelled_when_the_disk_refuses_its_stop(
    conversation: Conversation,
) -> None:
    log = conversation.log = _NearlyFullLog(conversation.log.path, room=100_000)

    def fill_the_disk() -> None:
        log.room = 0

    _cancel_while_a_tool_hangs(conversation, then=fill_the_disk)

    assert _roles(conversation) == ["user", "assistant", "tool"]


def test_context_overflow_from_the_provider_is_a_clear_error(conversation: Conversation) -> None:
    result = _run(conversation, ScriptedProvider([ContextOverflowError("too big for 1,200")]))
    assert result.stop_reason == "error"
    assert result.error is not None and result.error["code"] == "context_overflow"


def _cancel_while_a_tool_hangs(conversation: Conversation, *, then: Any = None) -> None:
    """Run a turn whose second tool never returns, call ``then()``, and cancel the turn;
    the turn must end in ``CancelledError``."""
    provider = ScriptedProvider([tool_reply(("echo", '{"text": "kept"}'), ("hang", "{}"))])

    async def cancel_soon() -> None:
        async def system_prompt() -> str:
            return "sys"

        hang = Hang()
        hang.started = asyncio.Event()
        turn = Turn(
            conversation=conversation,
            provider=provider,
            tools=[Echo(), hang],
            tool_context=ToolContext(
                agent_id="agent-1",
                workspace=Path("/tmp"),
                memory_dir=Path("/tmp"),
            ),
            system_prompt=system_prompt,
        )
        user = Message.of(
            id=new_id("msg"),
            agent_id="agent-1",
            conversation_id=conversation.id,
            role="user",
            content="go",
        )
        task = asyncio.create_task(run_turn(turn, [user]))
        await asyncio.wait_for(
            hang.started.wait(), ceiling(30)
        )  # the first tool is done and logged
        if then is not None:
            then()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())


def test_a_cancelled_turn_records_cancelled_and_keeps_what_was_done(
    conversation: Conversation,
) -> None:
    _cancel_while_a_tool_hangs(conversation)
    log = list(conversation.log)
    assert [m.role if m.kind == "message" else m.kind for m in log] == [
        "user",
        "assistant",
        "tool",
        "stop",
    ]
    assert log[-1].stop_reason == "cancelled"


def _listed_window(conversation: Conversation) -> list[str]:
    return json.loads(conversation.files.context.read_text())["message_ids"]


def test_a_turn_ends_with_context_json_listing_its_window(conversation: Conversation) -> None:
    """Appends inside a turn leave ``context.json`` alone (opening the conversation
    replays the log past it); the turn's end writes it, however the turn ended."""
    _run(conversation, ScriptedProvider([tool_reply(("echo", '{"text": "a"}')), text_reply("b")]))
    assert _listed_window(conversation) == [m.id for m in conversation.context]
    assert len(conversation.context) == 4

    down = ProviderHTTPError("openai/x failed with 503", status_code=503, model="openai/x")
    _run(conversation, ScriptedProvider([down]))
    assert _listed_window(conversation) == [m.id for m in conversation.context]

    _cancel_while_a_tool_hangs(conversation)
    assert _listed_window(conversation) == [m.id for m in conversation.context]
    assert conversation.context[-1].role == "tool"
