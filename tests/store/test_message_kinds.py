"""Each kind of message is its own model with only its own fields; a line is read as the
kind it says (``kind``, or ``role`` for ordinary messages) and the socket API still shows
every kind in one shape."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.models.messages import (
    AssistantMessage,
    Message,
    NoteMessage,
    ReminderMessage,
    StopRecord,
    SummaryMessage,
    ToolResult,
    UserMessage,
)
from shared.store.jsonl import MessageLog
from tests.support.messages import stop_payload

FIXTURE = Path(__file__).parent / "fixtures" / "messages-2026-11.jsonl"


def test_a_log_reads_each_line_as_its_kind_with_only_that_kinds_fields() -> None:
    messages = list(MessageLog(FIXTURE))

    assert [type(m) for m in messages] == [
        UserMessage,
        AssistantMessage,
        ToolResult,
        AssistantMessage,
        ToolResult,
        NoteMessage,
        AssistantMessage,
        ReminderMessage,
        UserMessage,
        SummaryMessage,
        StopRecord,
        StopRecord,
        AssistantMessage,
    ]
    user, summary, stop = messages[0], messages[9], messages[10]
    assert not hasattr(user, "tool_calls") and not hasattr(user, "payload")
    assert isinstance(summary, SummaryMessage) and summary.payload.kept_ids == [
        messages[7].id,
        messages[8].id,
    ]
    assert isinstance(stop, StopRecord) and stop.payload.code == "provider_http_error"


def test_a_summary_line_without_its_payload_is_skipped_not_read_as_a_summary(
    tmp_path: Path,
) -> None:
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    summary = lines[9]
    stripped = summary[: summary.index(b',"metadata":')] + b"}\n"
    path = tmp_path / "messages.jsonl"
    path.write_bytes(lines[8] + stripped)

    assert [m.id for m in MessageLog(path)] == ["msg-01HFIXTURE00000000000008"]


def test_message_of_builds_the_kind_its_fields_name_and_refuses_a_kind_without_its_payload() -> (
    None
):
    fields = {"id": "m", "agent_id": "a", "conversation_id": "c"}

    assert type(Message.of(**fields, role="tool", tool_call_id="x")) is ToolResult
    stop = Message.of(
        **fields, role="assistant", kind="stop", stop_reason="error", payload=stop_payload()
    )
    assert type(stop) is StopRecord and not stop.sent_to_model
    with pytest.raises(ValidationError):
        Message.of(**fields, role="assistant", kind="stop", stop_reason="error")
    with pytest.raises(ValidationError):
        Message.of(**fields, role="user", kind="stop", stop_reason="error", payload=stop_payload())


def test_the_socket_api_shows_every_kind_in_the_one_shape_it_always_had() -> None:
    messages = list(MessageLog(FIXTURE))

    assert list(messages[0].to_api()) == [
        "id",
        "agent_id",
        "conversation_id",
        "role",
        "kind",
        "content",
        "tool_calls",
        "is_error",
        "created_at",
        "turn_id",
        "metadata",
    ]
    stop = messages[10].to_api()
    assert (stop["kind"], stop["tool_calls"], stop["is_error"], stop["metadata"]) == (
        "stop",
        [],
        False,
        {"code": "provider_http_error"},
    )
