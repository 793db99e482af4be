"""Request shaping: what the provider sees is always a well-formed tool-call history."""

from __future__ import annotations

from shared.agent.request import NOT_EXECUTED, shape_messages
from shared.models.messages import Message, ToolCall, ToolResult
from tests.support.messages import stop_payload


def _m(id: str, role: str, **fields: object) -> Message:
    return Message.of(id=id, agent_id="a", conversation_id="c", role=role, **fields)


def test_a_result_whose_call_was_compacted_away_is_dropped() -> None:
    window = [_m("1", "tool", tool_call_id="gone", content="orphan"), _m("2", "user", content="hi")]
    assert [m.id for m in shape_messages(window)] == ["2"]


def test_an_unanswered_call_gets_a_not_executed_result_before_the_next_message() -> None:
    call = ToolCall(id="call-1", name="bash", arguments="{}")
    window = [
        _m("1", "user", content="do it"),
        _m("2", "assistant", tool_calls=[call]),
        _m("3", "user", content="never mind"),
    ]
    shaped = shape_messages(window)
    assert [(m.role, m.content) for m in shaped] == [
        ("user", "do it"),
        ("assistant", ""),
        ("tool", NOT_EXECUTED),
        ("user", "never mind"),
    ]
    assert isinstance(shaped[2], ToolResult) and shaped[2].tool_call_id == "call-1"


def test_answered_calls_pass_through_unchanged() -> None:
    calls = [ToolCall(id="a", name="x"), ToolCall(id="b", name="y")]
    window = [
        _m("1", "assistant", tool_calls=calls),
        _m("2", "tool", tool_call_id="a", content="A"),
        _m("3", "tool", tool_call_id="b", content="B"),
    ]
    assert shape_messages(window) == window


def test_stop_records_are_never_sent() -> None:
    window = [
        _m("1", "user", content="hi"),
        _m(
            "2",
            "assistant",
            kind="stop",
            content="failed",
            stop_reason="error",
            payload=stop_payload(),
        ),
    ]
    assert [m.id for m in shape_messages(window)] == ["1"]
