"""reflection-state.json: step counting, rebuild, migration, the consumed-outcome watermark
advance with its snapshot boundary, and no lost updates (spec §2; §7 items 8, 9, 11,
15–18)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from shared.errors import ReflectionError, StateFileTooNew
from shared.models.messages import Message, ToolCall
from shared.models.migrations import current_version
from shared.reflection import state as state_module
from shared.reflection.slices import Slice, replay_slice, select_slice
from shared.reflection.state import (
    STATE_SCHEMA_VERSION,
    advance,
    load_state,
    mark_started,
    record_turn,
)
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.messages import stop_payload, summary_payload
from tests.support.transcripts import say
from tests.support.waiting import ceiling


def turn(chat: Conversation, text: str) -> Message:
    """A user message and an assistant reply, counted like the daemon does after end_turn."""
    say(chat, "user", text)
    reply = say(chat, "assistant", f"re: {text}")
    record_turn(chat.directory, 1)
    return reply


def stored(chat: Conversation) -> dict[str, Any]:
    return json.loads((chat.files.reflection_state).read_text())


def current_slice(chat: Conversation) -> Slice:
    found = select_slice(chat.log.path, load_state(chat.directory).watermark)
    assert found is not None
    return found


def counters(chat: Conversation) -> tuple[int, int, int]:
    state = load_state(chat.directory)
    return (
        state.total_completed_steps,
        state.reflected_completed_steps,
        state.steps_since_last_reflection,
    )


def test_a_missing_state_is_rebuilt_from_the_log_and_written(chat: Conversation) -> None:
    say(chat, "user", "one")
    say(chat, "assistant", "1")
    say(chat, "assistant", tool_calls=[ToolCall(id="c", name="shell")])

    state = load_state(chat.directory)

    assert state.watermark is None
    assert (state.total_completed_steps, state.reflected_completed_steps) == (2, 0)
    assert stored(chat)["schema_version"] == STATE_SCHEMA_VERSION
    assert stored(chat)["steps_since_last_reflection"] == 2


def test_every_assistant_message_is_a_step_and_nothing_else_is(chat: Conversation) -> None:
    say(chat, "user", "one")
    say(chat, "assistant", tool_calls=[ToolCall(id="c", name="shell")])
    say(chat, "tool", "ok", tool_call_id="c")
    say(chat, "assistant", "done")
    say(chat, "user", "summary", kind="summary", payload=summary_payload())
    say(chat, "user", "<memory_update>", kind="reminder")
    say(chat, "user", "note", kind="note")
    say(chat, "assistant", "error", kind="stop", stop_reason="error", payload=stop_payload())

    assert counters(chat) == (2, 0, 2)


def test_the_first_turn_of_a_conversation_is_counted_once(chat: Conversation) -> None:
    turn(chat, "one")

    assert counters(chat) == (1, 0, 1)
    turn(chat, "two")
    assert counters(chat) == (2, 0, 2)


def test_an_assistant_only_turn_adds_one_step(chat: Conversation) -> None:
    turn(chat, "one")
    say(chat, "assistant", "a follow-up")

    assert record_turn(chat.directory, 1).total_completed_steps == 2


def test_a_negative_step_count_is_refused(chat: Conversation) -> None:
    with pytest.raises(ValueError):
        record_turn(chat.directory, -1)


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[1, 2]",
        b'{"schema_version": "v3"}',
        b'{"schema_version": 2.0}',
        b"",
    ],
)
def test_an_unreadable_state_is_rebuilt_as_entirely_unreflected_with_a_warning(
    chat: Conversation, content: bytes
) -> None:
    turn(chat, "one")
    advance(chat.directory, current_slice(chat))
    turn(chat, "two")
    (chat.files.reflection_state).write_bytes(content)

    with capture_logs() as logs:
        state = load_state(chat.directory)

    assert state.watermark is None
    assert (state.total_completed_steps, state.reflected_completed_steps) == (2, 0)
    assert [e["event"] for e in logs] == ["reflection_state_rebuilt"]
    assert stored(chat)["total_completed_steps"] == 2


def test_a_rebuilt_state_already_counts_the_turn_that_triggered_it(chat: Conversation) -> None:
    turn(chat, "one")
    (chat.files.reflection_state).write_text("garbage")
    say(chat, "user", "two")
    say(chat, "assistant", "2")

    assert record_turn(chat.directory, 1).total_completed_steps == 2


def test_odd_values_are_normalised_and_the_file_rewritten(chat: Conversation) -> None:
    turn(chat, "one")
    (chat.files.reflection_state).write_text(
        json.dumps(
            {
                "schema_version": STATE_SCHEMA_VERSION,
                "watermark": "",
                "total_completed_steps": 3,
                "reflected_completed_steps": 7,
                "last_reflection_started_at": "",
                "last_reflection_succeeded_at": "yesterday",
            }
        )
    )

    state = load_state(chat.directory)

    assert state.watermark is None
    assert (state.total_completed_steps, state.reflected_completed_steps) == (3, 3)
    assert state.last_reflection_started_at is None
    assert state.last_reflection_succeeded_at is None
    assert stored(chat)["reflected_completed_steps"] == 3


def test_negative_or_non_integer_counters_become_zero(chat: Conversation) -> None:
    (chat.files.reflection_state).write_text(
        json.dumps(
            {
                "schema_version": STATE_SCHEMA_VERSION,
                "total_completed_steps": -4,
                "reflected_completed_steps": "2",
            }
        )
    )

    assert counters(chat) == (0, 0, 0)


def test_an_intact_state_is_read_without_rewriting(chat: Conversation) -> None:
    turn(chat, "one")
    path = chat.files.reflection_state
    before = path.stat().st_mtime_ns

    load_state(chat.directory)

    assert path.stat().st_mtime_ns == before


def test_the_state_is_at_the_version_its_registered_migrations_reach() -> None:
    assert STATE_SCHEMA_VERSION == current_version("reflection-state") == 2


def test_a_state_from_a_newer_agentd_is_refused_and_left_as_it_is(chat: Conversation) -> None:
    turn(chat, "one")
    newer = b'{"schema_version": 99, "watermark": "msg-x", "total_completed_steps": 7}'
    (chat.files.reflection_state).write_bytes(newer)

    with pytest.raises(StateFileTooNew, match="newer agentd") as caught:
        record_turn(chat.directory, 1)

    assert caught.value.code == "state_file_too_new"
    assert (chat.files.reflection_state).read_bytes() == newer


def test_a_v1_state_with_turn_counters_migrates_to_step_counters(chat: Conversation) -> None:
    say(chat, "user", "u1")
    a1 = say(chat, "assistant", "a1")
    say(chat, "user", "u2")
    say(chat, "assistant", "a2")
    started = "2026-01-02T03:04:05.678000Z"
    (chat.files.reflection_state).write_text(
        json.dumps(
            {
                "reflected_through_message_id": a1.id,
                "turns_since": 1,
                "last_reflection_started_at": started,
                "last_reflection_succeeded_at": started,
            }
        )
    )

    with capture_logs() as logs:
        state = load_state(chat.directory)

    assert state.watermark == a1.id
    assert (
        state.total_completed_steps,
        state.reflected_completed_steps,
        state.steps_since_last_reflection,
    ) == (2, 1, 1)
    assert state.last_reflection_started_at == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert logs[0]["steps"] == ["v1_to_v2_count_assistant_steps"]
    on_disk = stored(chat)
    assert on_disk["schema_version"] == STATE_SCHEMA_VERSION
    assert "turns_since" not in on_disk
    assert "reflected_through_message_id" not in on_disk


def test_a_v1_watermark_missing_from_the_log_leaves_everything_unreflected(
    chat: Conversation,
) -> None:
    turn(chat, "one")
    (chat.files.reflection_state).write_text(
        json.dumps({"schema_version": 1, "reflected_through_message_id": "msg-gone"})
    )

    assert counters(chat) == (1, 0, 1)


def test_a_turn_recorded_right_after_migration_is_not_counted_twice(
    chat: Conversation,
) -> None:
    say(chat, "user", "u1")
    say(chat, "assistant", "a1")
    (chat.files.reflection_state).write_text(json.dumps({"turns_since": 1}))

    assert record_turn(chat.directory, 1).total_completed_steps == 1


def test_mark_started_sets_only_the_start_time(chat: Conversation) -> None:
    turn(chat, "one")
    at = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)

    state = mark_started(chat.directory, at)

    assert state.last_reflection_started_at == at
    assert state.last_reflection_succeeded_at is None
    assert state.watermark is None
    assert counters(chat) == (1, 0, 1)


def test_a_consumed_slice_advances_the_watermark_and_resets_the_count(
    chat: Conversation,
) -> None:
    a1 = turn(chat, "I prefer tabs")
    found = current_slice(chat)

    state = advance(chat.directory, found)

    assert state.watermark == a1.id
    assert (
        state.total_completed_steps,
        state.reflected_completed_steps,
        state.steps_since_last_reflection,
    ) == (1, 1, 0)
    assert state.last_reflection_succeeded_at is not None
    assert select_slice(chat.log.path, state.watermark) is None


def test_without_an_advance_the_same_slice_is_offered_again(chat: Conversation) -> None:
    turn(chat, "one")
    first = current_slice(chat)
    mark_started(chat.directory, datetime.now(UTC))

    assert load_state(chat.directory).watermark is None
    assert counters(chat) == (1, 0, 1)
    assert current_slice(chat) == first


def test_steps_logged_after_the_snapshot_stay_unreflected(chat: Conversation) -> None:
    a1 = turn(chat, "one")
    found = current_slice(chat)
    turn(chat, "two")
    turn(chat, "three")

    state = advance(chat.directory, found)

    assert state.watermark == a1.id
    assert counters(chat) == (3, 1, 2)


def test_a_user_only_message_after_a_consumed_reflection_makes_a_new_slice(
    chat: Conversation,
) -> None:
    turn(chat, "one")
    advance(chat.directory, current_slice(chat))
    u2 = say(chat, "user", "two")
    record_turn(chat.directory, 0)

    assert counters(chat) == (1, 1, 0)
    found = current_slice(chat)
    assert found.start_id == found.end_id == u2.id


def test_finishing_the_same_slice_twice_changes_nothing(chat: Conversation) -> None:
    turn(chat, "one")
    found = current_slice(chat)
    first = advance(chat.directory, found)
    turn(chat, "two")

    second = advance(chat.directory, found)

    assert second.watermark == first.watermark
    assert second.last_reflection_succeeded_at == first.last_reflection_succeeded_at
    assert counters(chat) == (2, 1, 1)


def test_an_older_slice_never_moves_the_watermark_back(chat: Conversation) -> None:
    turn(chat, "one")
    old = current_slice(chat)
    a2 = turn(chat, "two")
    advance(chat.directory, current_slice(chat))

    state = advance(chat.directory, old)

    assert state.watermark == a2.id
    assert counters(chat) == (2, 2, 0)


def test_a_replay_slice_never_moves_the_watermark(chat: Conversation) -> None:
    turn(chat, "one")
    replay = replay_slice(chat.log.path)
    assert replay is not None

    state = advance(chat.directory, replay)

    assert state.watermark is None
    assert counters(chat) == (1, 0, 1)


def test_an_unknown_watermark_is_replaced_by_the_consumed_slice_end(chat: Conversation) -> None:
    turn(chat, "one")
    a2 = turn(chat, "two")
    data = stored(chat) | {"watermark": "msg-lost"}
    (chat.files.reflection_state).write_text(json.dumps(data))
    found = current_slice(chat)

    assert advance(chat.directory, found).watermark == a2.id
    assert counters(chat) == (2, 2, 0)


def test_a_slice_of_another_conversation_cannot_advance_this_one(
    chat: Conversation, tmp_path: Path
) -> None:
    turn(chat, "one")
    other = Conversation.create(Layout(tmp_path), "agent-1", memory_head=None)
    turn(other, "elsewhere")
    foreign = current_slice(other)

    with pytest.raises(ReflectionError):
        advance(chat.directory, foreign)
    assert load_state(chat.directory).watermark is None


def test_concurrent_turns_and_an_advance_lose_no_update(chat: Conversation) -> None:
    turn(chat, "one")
    found = current_slice(chat)
    for text in ("two", "three"):
        say(chat, "user", text)
        say(chat, "assistant", f"re: {text}")
    jobs = [
        threading.Thread(target=record_turn, args=(chat.directory, 1)),
        threading.Thread(target=advance, args=(chat.directory, found)),
        threading.Thread(target=record_turn, args=(chat.directory, 1)),
    ]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()

    assert counters(chat) == (3, 1, 2)


def test_many_threads_recording_turns_lose_no_update(chat: Conversation) -> None:
    load_state(chat.directory)

    def work() -> None:
        for _ in range(20):
            record_turn(chat.directory, 1)

    jobs = [threading.Thread(target=work) for _ in range(5)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()

    assert counters(chat) == (100, 0, 100)


def test_two_processes_recording_turns_lose_no_update(chat: Conversation) -> None:
    load_state(chat.directory)
    script = (
        "import sys; from pathlib import Path;"
        "from shared.reflection.state import record_turn\n"
        "for _ in range(40): record_turn(Path(sys.argv[1]), 1)"
    )
    root = Path(__file__).resolve().parents[2]
    workers = [
        subprocess.Popen([sys.executable, "-c", script, str(chat.directory)], cwd=root)
        for _ in range(2)
    ]

    assert [w.wait(timeout=ceiling(60)) for w in workers] == [0, 0]
    assert counters(chat) == (80, 0, 80)


class _GatedLogReads:
    """``read_rows`` of the state module, whose first call waits for ``go`` (or runs
    ``meanwhile``) before reading: an advance caught in the middle of parsing its log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, meanwhile: Any = None) -> None:
        self.reading = threading.Event()
        self.go = threading.Event()
        self.meanwhile = meanwhile
        self._first = True
        self._read_rows = state_module.read_rows
        monkeypatch.setattr(state_module, "read_rows", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._first:
            self._first = False
            self.reading.set()
            if self.meanwhile is not None:
                self.meanwhile()
            else:
                assert self.go.wait(ceiling(30)), "the test never let the log read finish"
        return self._read_rows(*args, **kwargs)


def test_a_turn_is_counted_while_an_advance_parses_the_log(
    chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn(chat, "one")
    found = current_slice(chat)
    gate = _GatedLogReads(monkeypatch)
    advancing = threading.Thread(target=advance, args=(chat.directory, found))
    advancing.start()
    assert gate.reading.wait(ceiling(30))

    counting = threading.Thread(target=record_turn, args=(chat.directory, 1))
    counting.start()
    counting.join(ceiling(10))
    counted_during_the_parse = not counting.is_alive()
    gate.go.set()
    advancing.join(ceiling(30))
    counting.join(ceiling(30))

    assert counted_during_the_parse, "record_turn waited for an advance reading its log"
    assert counters(chat) == (2, 1, 1)


def test_an_advance_overtaken_while_it_parsed_does_not_move_the_watermark_back(
    chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn(chat, "one")
    old = current_slice(chat)
    a2 = turn(chat, "two")
    newer = current_slice(chat)
    _GatedLogReads(monkeypatch, meanwhile=lambda: advance(chat.directory, newer))

    state = advance(chat.directory, old)

    assert state.watermark == a2.id
    assert counters(chat) == (2, 2, 0)
