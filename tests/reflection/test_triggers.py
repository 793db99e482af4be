"""The post-turn check: count the turn, decide, record a due request, then always consume
the compaction flag (spec §1 "Post-turn algorithm"; §7 items 1–4 and 7)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from shared.ids import new_id
from shared.models.agents import CompactionEvent
from shared.reflection.policy import ReflectionSettings
from shared.reflection.slices import select_slice
from shared.reflection.state import TranscriptState, advance, load_state
from shared.reflection.triggers import consume_compaction_flag, due_trigger, post_turn
from shared.store.atomic import write_model_atomic
from shared.store.conversations import Conversation
from tests.support.transcripts import say

OFF = ReflectionSettings(trigger="off")
ON_COMPACTION = ReflectionSettings(trigger="compaction-event")


def every(n: int) -> ReflectionSettings:
    return ReflectionSettings(trigger="step-count", step_count=n)


def turn(
    chat: Conversation,
    settings: ReflectionSettings,
    text: str = "hi",
    record: Callable[[str], object] = lambda _trigger: None,
) -> Any:
    """One end_turn turn (user message, assistant reply) and the post-turn check."""
    say(chat, "user", text)
    say(chat, "assistant", f"re: {text}")
    return check(chat, settings, 1, record)


def check(
    chat: Conversation,
    settings: ReflectionSettings,
    steps: int,
    record: Callable[[str], object] = lambda _trigger: None,
) -> Any:
    """The post-turn check of a turn of ``steps`` assistant steps, as the daemon runs it."""

    async def recorded(trigger: str) -> None:
        record(trigger)

    return asyncio.run(post_turn(chat.directory, settings, steps, recorded))


def compacted(chat: Conversation) -> None:
    write_model_atomic(
        chat.files.compaction_event,
        CompactionEvent(trigger="context_pressure", summary_message_id=new_id("msg")),
    )


def pending(chat: Conversation) -> bool:
    return json.loads((chat.files.compaction_event).read_text())["pending"]


def since(n: int) -> TranscriptState:
    return TranscriptState(total_completed_steps=n)


def test_step_count_fires_at_the_threshold_and_not_below_it() -> None:
    assert due_trigger(every(3), since(3), False) == "step-count"
    assert due_trigger(every(3), since(4), False) == "step-count"
    assert due_trigger(every(3), since(2), False) is None


def test_step_count_uses_the_steps_since_the_last_reflection() -> None:
    state = TranscriptState(total_completed_steps=5, reflected_completed_steps=3)

    assert due_trigger(every(3), state, True) is None


def test_compaction_event_fires_only_when_a_compaction_is_pending() -> None:
    assert due_trigger(ON_COMPACTION, since(100), True) == "compaction-event"
    assert due_trigger(ON_COMPACTION, since(100), False) is None


def test_off_never_fires() -> None:
    assert due_trigger(OFF, since(100), True) is None


def test_a_pending_compaction_below_the_step_threshold_is_consumed_without_a_launch(
    chat: Conversation,
) -> None:
    compacted(chat)

    decision = turn(chat, every(3))

    assert decision.trigger is None
    assert pending(chat) is False


def test_a_pending_compaction_fires_once_and_is_cleared(chat: Conversation) -> None:
    compacted(chat)

    first = turn(chat, ON_COMPACTION)
    second = turn(chat, ON_COMPACTION)

    assert (first.trigger, second.trigger) == ("compaction-event", None)
    assert pending(chat) is False


def test_the_flag_is_cleared_only_after_the_request_is_recorded(chat: Conversation) -> None:
    compacted(chat)
    recorded: list[tuple[str, bool]] = []

    turn(chat, ON_COMPACTION, record=lambda trigger: recorded.append((trigger, pending(chat))))

    assert recorded == [("compaction-event", True)]
    assert pending(chat) is False


def test_a_request_that_could_not_be_recorded_leaves_the_compaction_pending(
    chat: Conversation,
) -> None:
    compacted(chat)

    def disk_full(_trigger: str) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        turn(chat, ON_COMPACTION, record=disk_full)

    assert pending(chat) is True
    assert turn(chat, ON_COMPACTION).trigger == "compaction-event"


def test_a_compaction_of_the_next_turn_is_left_for_that_turn(chat: Conversation) -> None:
    compacted(chat)

    first = turn(chat, ON_COMPACTION, record=lambda _trigger: compacted(chat))

    assert first.trigger == "compaction-event"
    assert pending(chat) is True
    assert turn(chat, ON_COMPACTION).trigger == "compaction-event"


def test_the_default_trigger_fires_on_a_compaction_and_not_without_one(
    chat: Conversation,
) -> None:
    recorded: list[str] = []

    quiet = [turn(chat, ReflectionSettings(), f"turn {n}", recorded.append) for n in range(5)]
    compacted(chat)
    fired = turn(chat, ReflectionSettings(), "after the compaction", recorded.append)

    assert [decision.trigger for decision in quiet] == [None] * 5
    assert fired.trigger == "compaction-event"
    assert recorded == ["compaction-event"]


def test_a_compaction_seen_while_off_is_never_replayed_after_the_trigger_changes(
    chat: Conversation,
) -> None:
    compacted(chat)
    assert pending(chat) is True

    assert turn(chat, OFF).trigger is None
    assert pending(chat) is False
    assert turn(chat, ON_COMPACTION).trigger is None
    compacted(chat)
    assert turn(chat, ON_COMPACTION).trigger == "compaction-event"


def test_a_real_transcript_fires_step_count_after_enough_turns(chat: Conversation) -> None:
    assert check(chat, every(2), 0).trigger is None

    first = turn(chat, every(2), "one")
    second = turn(chat, every(2), "two")

    assert first.trigger is None
    assert second.trigger == "step-count"
    assert second.state.steps_since_last_reflection == 2


def test_mini_letta_step_count_3_fires_on_the_third_turn(chat: Conversation) -> None:
    texts = ["帮我看下这个报错", "我更喜欢用 tabs 缩进", "今天我们决定以后一律用 pnpm"]

    triggers = [turn(chat, every(3), text).trigger for text in texts]

    assert triggers == [None, None, "step-count"]


def test_after_a_consumed_reflection_step_count_waits_for_new_steps(chat: Conversation) -> None:
    turn(chat, every(2), "one")
    turn(chat, every(2), "two")
    found = select_slice(chat.log.path, None)
    assert found is not None
    advance(chat.directory, found)

    assert turn(chat, every(2), "three").trigger is None
    assert turn(chat, every(2), "four").trigger == "step-count"


def test_an_unconsumed_reflection_lets_step_count_fire_again(chat: Conversation) -> None:
    turn(chat, every(1))

    assert turn(chat, every(1)).trigger == "step-count"
    assert load_state(chat.directory).steps_since_last_reflection == 2


def test_consuming_a_missing_flag_is_false(chat: Conversation) -> None:
    assert consume_compaction_flag(chat.directory) is False
    assert not (chat.files.compaction_event).exists()


def test_consuming_a_flag_keeps_the_event_and_clears_pending(chat: Conversation) -> None:
    compacted(chat)
    before = json.loads((chat.files.compaction_event).read_text())

    assert consume_compaction_flag(chat.directory) is True
    assert consume_compaction_flag(chat.directory) is False
    after = json.loads((chat.files.compaction_event).read_text())
    assert after == before | {"pending": False}


def test_an_unreadable_flag_counts_as_no_compaction(chat: Conversation) -> None:
    (chat.files.compaction_event).write_text("{torn")

    with capture_logs() as logs:
        assert consume_compaction_flag(chat.directory) is False

    assert [e["event"] for e in logs] == ["compaction_event_unreadable"]


def test_the_turn_is_counted_before_the_decision(chat: Conversation) -> None:
    decision = turn(chat, every(1))

    assert decision.trigger == "step-count"
    assert decision.state.total_completed_steps == 1
    assert load_state(chat.directory) == decision.state
