"""A conversation's window: context.json replaced atomically, rebuilt from the log tail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import CorruptStateFile, InvalidId, UnknownConversation
from shared.ids import new_id
from shared.models.agents import CompactionEvent
from shared.models.messages import Message
from shared.store.atomic import read_model
from shared.store.conversations import Conversation, list_conversations
from shared.store.layout import Layout
from tests.support.messages import stop_payload, summary_payload


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def _message(conversation: Conversation, text: str, **fields: object) -> Message:
    return Message.of(
        id=new_id("msg"),
        agent_id=conversation.agent_id,
        conversation_id=conversation.id,
        role="user",
        content=text,
        **fields,
    )


def test_reopened_conversation_has_the_same_window(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append([_message(conversation, f"m{i}") for i in range(4)])

    reopened = Conversation.open(layout, "agent-1", conversation.id)

    assert [m.content for m in reopened.context] == ["m0", "m1", "m2", "m3"]


def _summary(conversation: Conversation, kept: list[Message]) -> Message:
    return _message(
        conversation,
        "summary of m0-m3",
        kind="summary",
        payload=summary_payload("m0-m3", kept_ids=[m.id for m in kept]),
    )


def _compact(conversation: Conversation, kept: list[Message]) -> Message:
    summary = _summary(conversation, kept)
    event = CompactionEvent(trigger="context_pressure", summary_message_id=summary.id)
    conversation.compact(summary, kept, event)
    return summary


def test_a_compacted_window_survives_reopen_and_the_log_keeps_everything(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append([_message(conversation, f"m{i}") for i in range(6)])
    kept = conversation.context[4:]
    summary = _compact(conversation, kept)

    reopened = Conversation.open(layout, "agent-1", conversation.id)

    assert [m.content for m in reopened.context] == ["summary of m0-m3", "m4", "m5"]
    assert [m.content for m in reopened.log] == [f"m{i}" for i in range(6)] + ["summary of m0-m3"]
    event = read_model(conversation.files.compaction_event, CompactionEvent)
    assert event is not None and (event.pending, event.summary_message_id) == (True, summary.id)


def test_a_crash_between_summary_append_and_context_replace_is_replayed(
    layout: Layout,
) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append([_message(conversation, f"m{i}") for i in range(6)])
    kept = conversation.context[4:]
    conversation.log.append([_summary(conversation, kept)])  # died before context.json
    conversation.log.append([_message(conversation, "after")])

    reopened = Conversation.open(layout, "agent-1", conversation.id)

    assert [m.content for m in reopened.context] == ["summary of m0-m3", "m4", "m5", "after"]


def test_without_a_context_file_the_window_is_replayed_from_the_whole_log(
    layout: Layout,
) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append([_message(conversation, f"m{i}") for i in range(6)])
    kept = conversation.context[4:]
    _compact(conversation, kept)
    (conversation.directory / "context.json").unlink()

    reopened = Conversation.open(layout, "agent-1", conversation.id)

    assert [m.content for m in reopened.context] == ["summary of m0-m3", "m4", "m5"]


def test_messages_appended_after_the_last_context_write_rejoin_the_window(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append([_message(conversation, "listed")])
    # A crash between the log append and the context.json replace:
    conversation.log.append([_message(conversation, "unlisted")])

    reopened = Conversation.open(layout, "agent-1", conversation.id)

    assert [m.content for m in reopened.context] == ["listed", "unlisted"]


def test_stop_records_stay_in_the_log_but_out_of_the_window(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    conversation.append(
        [
            _message(conversation, "hi"),
            conversation.new_message(
                role="assistant",
                kind="stop",
                content="turn failed",
                stop_reason="error",
                payload=stop_payload(),
            ),
        ]
    )
    assert [m.content for m in conversation.context] == ["hi"]
    assert [m.content for m in Conversation.open(layout, "agent-1", conversation.id).context] == [
        "hi"
    ]
    assert len(list(conversation.log)) == 2


def test_context_file_is_replaced_not_rewritten_in_place(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    path = conversation.directory / "context.json"
    inode_before = path.stat().st_ino
    conversation.append([_message(conversation, "x")])
    conversation.save_context()
    assert path.stat().st_ino != inode_before
    assert json.loads(path.read_text())["message_ids"] == [conversation.context[0].id]
    assert not list(conversation.directory.glob(".context.json.tmp-*"))


def test_corrupt_context_file_is_a_typed_error_naming_the_file(layout: Layout) -> None:
    conversation = Conversation.create(layout, "agent-1", memory_head=None)
    (conversation.directory / "context.json").write_text("{not json")
    with pytest.raises(CorruptStateFile, match=r"context\.json"):
        Conversation.open(layout, "agent-1", conversation.id)


def test_unknown_and_path_like_conversation_ids_are_refused(layout: Layout) -> None:
    with pytest.raises(UnknownConversation):
        Conversation.open(layout, "agent-1", "conv-missing")
    with pytest.raises(InvalidId):
        Conversation.open(layout, "agent-1", "../../etc")


def test_conversations_are_listed_oldest_first(layout: Layout) -> None:
    first = Conversation.create(layout, "agent-1", memory_head=None)
    second = Conversation.create(layout, "agent-1", memory_head=None)
    assert [c.id for c in list_conversations(layout, "agent-1")] == [first.id, second.id]
