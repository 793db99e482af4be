"""The budget: threshold, usage-anchored estimates, and the prompt floor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.context.budget import (
    Budget,
    check_floor,
    compaction_threshold,
    estimate_messages,
    suggested_window,
)
from shared.errors import PromptFloorError
from shared.models.messages import Message, ToolCall, Usage
from tests.support.messages import summary_payload

T0 = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "threshold"),
    [
        (1, 0),
        (1_000, 800),
        (1_200, 960),
        (2_000, 1_600),
        (8_192, 6_554),
        (10_000, 8_000),
        (32_000, 25_600),
        (81_920, 65_536),
        (100_000, 83_616),
        (128_000, 111_616),
        (200_000, 183_616),
        (272_000, 255_616),
        (1_000_000, 983_616),
    ],
)
def test_threshold_reserves_16k_or_a_fifth_of_a_small_window(window: int, threshold: int) -> None:
    assert compaction_threshold(window) == threshold


def _m(role: str, text: str = "", *, at: int = 0, **fields: object) -> Message:
    return Message.of(
        id=f"m{at}-{role}",
        agent_id="a",
        conversation_id="c",
        role=role,
        content=text,
        created_at=T0 + timedelta(seconds=at),
        **fields,
    )


def _summary(*, at: int) -> Message:
    payload = summary_payload("s" * 400, at=T0 + timedelta(seconds=at))
    return _m("user", "s" * 400, at=at, kind="summary", payload=payload)


def test_without_usage_every_message_is_estimated_at_four_chars_a_token() -> None:
    call = ToolCall(id="1", name="read_file", arguments='{"path":"README.md"}')
    messages = [_m("user", "x" * 10, at=1), _m("assistant", at=2, tool_calls=[call])]
    estimate = estimate_messages(messages)
    assert (estimate.tokens, estimate.anchor_index) == (3 + 8, None)  # ceil(10/4), ceil(29/4)


def test_reported_usage_anchors_and_later_messages_are_added() -> None:
    usage = Usage(input_tokens=100, output_tokens=900, cache_read_tokens=20, cache_write_tokens=5)
    messages = [
        _m("user", "y" * 4000, at=1),
        _m("assistant", "ok", at=2, usage=usage),
        _m("user", "keep going", at=3),
    ]
    estimate = estimate_messages(messages)
    assert (estimate.tokens, estimate.anchor_index) == (1025 + 3, 1)


def test_usage_older_than_the_latest_compaction_is_void() -> None:
    stale = Usage(input_tokens=407_000)
    messages = [
        _summary(at=10),
        _m("assistant", "a" * 400, at=5, usage=stale),
    ]
    estimate = estimate_messages(messages)
    assert (estimate.tokens, estimate.anchor_index) == (200, None)


def test_usage_newer_than_the_compaction_anchors_again() -> None:
    messages = [
        _summary(at=10),
        _m("assistant", "old", at=5, usage=Usage(input_tokens=407_000)),
        _m("assistant", "fresh", at=15, usage=Usage(input_tokens=90_000)),
        _m("user", "next", at=16),
    ]
    assert estimate_messages(messages).tokens == 90_001


def test_all_zero_usage_is_never_an_anchor() -> None:
    messages = [_m("user", "abcd", at=1), _m("assistant", "abcd", at=2, usage=Usage())]
    assert estimate_messages(messages).anchor_index is None


def _budget(window: int, floor: int) -> Budget:
    return Budget(
        window=window,
        system_tokens=floor - 100,
        tools_tokens=100,
        message_count=0,
        messages_tokens=0,
        anchored=False,
    )


def test_a_floor_that_leaves_no_room_is_refused_with_the_numbers() -> None:
    with pytest.raises(PromptFloorError) as error:
        check_floor(_budget(1_000, 1_234), "openai/gpt-4o-mini")
    message = str(error.value)
    assert "~1,234 tokens" in message and "1,000-token window" in message
    assert "800 usable" in message and "larger context window" in message


def test_for_ollama_the_floor_error_suggests_the_next_window() -> None:
    with pytest.raises(PromptFloorError, match="OLLAMA_CONTEXT_LENGTH=8192 ollama serve"):
        check_floor(_budget(2_048, 1_700), "ollama/llama3.1")


def test_the_floor_is_refused_from_the_threshold_up_and_not_one_token_below() -> None:
    window = 1_200
    threshold = compaction_threshold(window)
    assert threshold == 960  # 20% of a small window is kept for the reply

    assert check_floor(_budget(window, threshold - 1), "mock") is None
    with pytest.raises(PromptFloorError, match=f"~{threshold:,} tokens"):
        check_floor(_budget(window, threshold), "mock")


@pytest.mark.parametrize(
    ("floor", "window"),
    [(100, 8_192), (8_193, 16_384), (40_000, 65_536), (2_000_000, 1_048_576)],
)
def test_suggested_windows_are_powers_of_two_with_room_above_the_floor(
    floor: int, window: int
) -> None:
    assert suggested_window(floor) == window
