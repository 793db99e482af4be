"""The loop's side of approvals, against a scripted provider: a step calling a tool that
needs a yes waits whole on disk, is carried out in the model's order once answered, and
whatever cuts it short (a cancel, agentd's death) never runs a call twice."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from shared.agent.approval_step import recover
from shared.agent.loop import Turn, resume_turn, run_turn
from shared.agent.rules import ToolRules
from shared.agent.tools.args import ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.ids import new_id
from shared.models.approvals import WaitingStep
from shared.models.events import Event
from shared.models.messages import Message, StopRecord, ToolResult
from shared.models.turns import TurnResult
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.store.approvals import load_step, save_step, unfinished_step
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.waiting import ceiling


class Note(Tool):
    """Records every call it runs, in order, in :attr:`ran`."""

    name = "note"
    description = "Note a word."
    ran: ClassVar[list[str]] = []

    class Args(ToolArgs):
        word: str

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        Note.ran.append(args.word)
        return f"noted {args.word}"


class Wipe(Tool):
    """The dangerous one: needs approval in these tests. Hangs while ``hold`` is set."""

    name = "wipe"
    description = "Wipe something."
    ran: ClassVar[list[str]] = []
    hold: ClassVar[asyncio.Event | None] = None
    started: ClassVar[asyncio.Event | None] = None

    class Args(ToolArgs):
        what: str

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        Wipe.ran.append(args.what)
        if Wipe.started is not None:
            Wipe.started.set()
        if Wipe.hold is not None:
            await Wipe.hold.wait()
        return f"wiped {args.what}"


GATED = ToolRules(requires_approval=frozenset({"wipe"}))


@pytest.fixture(autouse=True)
def fresh_tools() -> None:
    Note.ran, Wipe.ran, Wipe.hold, Wipe.started = [], [], None, None


@pytest.fixture
def conversation(tmp_path: Path) -> Conversation:
    return Conversation.create(Layout(tmp_path), "agent-1", memory_head=None)


def _turn(
    conversation: Conversation,
    provider: ScriptedProvider,
    *,
    max_steps: int = 50,
    events: list[tuple[str, dict[str, Any]]] | None = None,
    turn_id: str | None = None,
) -> Turn:
    async def emit(event: Event) -> None:
        if events is not None:
            events.append((event.name, event.data()))

    async def system_prompt() -> str:
        return "You are a test agent."

    turn = Turn(
        conversation=conversation,
        provider=provider,
        tools=[Note(), Wipe()],
        tool_context=ToolContext(
            agent_id="agent-1", workspace=Path("/tmp"), memory_dir=Path("/tmp")
        ),
        system_prompt=system_prompt,
        max_steps=max_steps,
        rules=GATED,
        emit=emit,
    )
    if turn_id is not None:
        turn.turn_id = turn_id
    return turn


def _say(conversation: Conversation, turn: Turn, text: str) -> TurnResult:
    user = Message.of(
        id=new_id("msg"),
        agent_id="agent-1",
        conversation_id=conversation.id,
        role="user",
        content=text,
    )
    return asyncio.run(run_turn(turn, [user]))


def _answer(
    conversation: Conversation, decision: str = "approved", reason: str | None = None
) -> WaitingStep:
    step = unfinished_step(conversation.directory)
    assert step is not None
    for call in step.waiting:
        call.state, call.reason = decision, reason  # type: ignore[assignment]
    save_step(conversation.directory, step)
    return step


def _results(conversation: Conversation) -> list[tuple[str | None, str, bool]]:
    return [(m.name, m.content, m.is_error) for m in conversation.log if isinstance(m, ToolResult)]


THREE_CALLS = tool_reply(
    ("note", '{"word": "before"}'), ("wipe", '{"what": "build"}'), ("note", '{"word": "after"}')
)


def test_a_step_with_a_call_needing_approval_runs_none_of_its_calls_and_waits_on_disk(
    conversation: Conversation,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    result = _say(
        conversation, _turn(conversation, ScriptedProvider([THREE_CALLS]), events=events), "tidy up"
    )

    assert result.stop_reason == "requires_approval"
    assert Note.ran == [] and Wipe.ran == [], "a call before the gated one ran out of turn"
    assert _results(conversation) == []
    step = load_step(conversation.directory)
    assert step is not None and step.finished_at is None
    assert [(c.name, c.state, c.approval_id is not None) for c in step.calls] == [
        ("note", "approved", False),
        ("wipe", "waiting", True),
        ("note", "approved", False),
    ]
    assert (step.turn_id, step.steps, step.assistant_messages) == (result.turn_id, 1, 1)
    assert step.message_id == result.message_ids[-1]
    assert [a["id"] for a in result.approvals] == [step.calls[1].approval_id]
    assert result.approvals[0]["arguments"] == '{"what": "build"}'
    waits = [d for e, d in events if e == "tool_call"]
    assert waits == [
        {
            "id": step.calls[1].tool_call_id,
            "name": "wipe",
            "arguments": '{"what": "build"}',
            "awaiting_approval": step.calls[1].approval_id,
        }
    ]


def test_an_approved_step_runs_every_call_in_the_models_order_and_the_turn_goes_on(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider(
        [THREE_CALLS, tool_reply(("note", '{"word": "more"}')), text_reply("all tidy")]
    )
    first = _say(conversation, _turn(conversation, provider), "tidy up")
    step = _answer(conversation)

    result = asyncio.run(resume_turn(_turn(conversation, provider, turn_id=first.turn_id), step))

    assert (result.stop_reason, result.text) == ("end_turn", "all tidy")
    assert Note.ran == ["before", "after", "more"] and Wipe.ran == ["build"]
    assert [name for name, _, _ in _results(conversation)] == ["note", "wipe", "note", "note"]
    # The whole turn, counted once: its steps before it waited and after.
    assert (result.turn_id, result.steps, result.assistant_messages) == (first.turn_id, 3, 3)
    assert {m.turn_id for m in conversation.log if m.role != "user"} == {first.turn_id}
    assert load_step(conversation.directory).finished_at is not None  # type: ignore[union-attr]
    assert unfinished_step(conversation.directory) is None
    sent = [m.role for m in provider.requests[1].messages]
    assert sent == ["user", "assistant", "tool", "tool", "tool"]


def test_a_denied_call_is_not_run_and_the_model_reads_the_reason(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider([THREE_CALLS, text_reply("understood")])
    first = _say(conversation, _turn(conversation, provider), "tidy up")
    step = _answer(conversation, "denied", "the build is needed for the release")

    result = asyncio.run(resume_turn(_turn(conversation, provider, turn_id=first.turn_id), step))

    assert result.stop_reason == "end_turn"
    assert Wipe.ran == [] and Note.ran == ["before", "after"]
    denial = ("wipe", "the user denied this call: the build is needed for the release", True)
    assert _results(conversation)[1] == denial
    told = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert (told[1].content, told[1].is_error) == (denial[1], True)


def test_a_step_answered_on_the_last_step_runs_then_stops_at_max_steps(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider([tool_reply(("wipe", '{"what": "x"}'))])
    first = _say(conversation, _turn(conversation, provider, max_steps=1), "go")
    step = _answer(conversation)

    result = asyncio.run(
        resume_turn(_turn(conversation, provider, max_steps=1, turn_id=first.turn_id), step)
    )

    assert (result.stop_reason, Wipe.ran, len(provider.requests)) == ("max_steps", ["x"], 1)


def test_a_cancel_while_an_approved_call_runs_settles_the_step_and_runs_nothing_again(
    conversation: Conversation,
) -> None:
    provider = ScriptedProvider([THREE_CALLS, text_reply("next turn")])
    first = _say(conversation, _turn(conversation, provider), "tidy up")
    step = _answer(conversation)

    async def cancel_mid_call() -> None:
        Wipe.hold, Wipe.started = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            resume_turn(_turn(conversation, provider, turn_id=first.turn_id), step)
        )
        await asyncio.wait_for(Wipe.started.wait(), ceiling(30))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_call())

    assert Wipe.ran == ["build"] and Note.ran == ["before"]
    results = _results(conversation)
    assert [(name, is_error) for name, _, is_error in results] == [
        ("note", False),
        ("wipe", True),
        ("note", True),
    ]
    assert results[1][1].startswith(
        "[interrupted: the turn was cancelled while this approved call ran"
    )
    assert results[2][1].startswith(
        "[not run: the turn was cancelled before this approved call started"
    )
    assert unfinished_step(conversation.directory) is None
    stops = [m for m in conversation.log if isinstance(m, StopRecord)]
    assert [s.stop_reason for s in stops] == ["cancelled"]
    # The next turn takes messages again, and nothing of the step runs again.
    again = Conversation.open(Layout(conversation.directory.parents[3]), "agent-1", conversation.id)
    assert _say(again, _turn(again, provider), "and now?").text == "next turn"
    assert Wipe.ran == ["build"] and Note.ran == ["before"]


def test_after_a_crash_a_running_call_is_told_interrupted_and_nothing_is_run_again(
    conversation: Conversation,
) -> None:
    """What agentd's start does with a step its death cut short: a denied call gets its
    denial, the call that was running may have taken effect, the one after never ran."""
    provider = ScriptedProvider(
        [
            tool_reply(
                ("wipe", '{"what": "a"}'), ("wipe", '{"what": "b"}'), ("note", '{"word": "c"}')
            ),
        ]
    )
    _say(conversation, _turn(conversation, provider), "go")
    step = unfinished_step(conversation.directory)
    assert step is not None
    step.calls[0].state, step.calls[0].reason = "denied", "no"
    step.calls[1].state = "running"  # as written before its tool started; then kill -9
    save_step(conversation.directory, step)
    reopened = Conversation.open(
        Layout(conversation.directory.parents[3]), "agent-1", conversation.id
    )

    recover(reopened, step, reopened.clock())

    assert Wipe.ran == [] and Note.ran == []
    results = _results(reopened)
    assert results[0] == ("wipe", "the user denied this call: no", True)
    assert results[1][1].startswith("[interrupted: agentd stopped while this approved call ran")
    assert results[2][1].startswith("[not run: agentd stopped before this approved call started")
    last = list(reopened.log)[-1]
    assert isinstance(last, StopRecord)
    assert (last.stop_reason, last.payload.code, last.turn_id) == (
        "cancelled",
        "interrupted",
        step.turn_id,
    )
    assert unfinished_step(reopened.directory) is None
    assert json.loads(reopened.files.approvals.read_text())["finished_at"] is not None
