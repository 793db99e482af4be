"""Payload slices of messages.jsonl: eligible bounds, snapshot offsets, bounded records,
single and multi payload files, the job's budget and parts that each fit one tool result
(spec §2; §7 items 8–10, 12–14, 19, 23)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from shared import sandbox
from shared.models.messages import ToolCall
from shared.reflection.payload import MANIFEST_TYPE, Limits, PayloadFile, write_payload
from shared.reflection.records import ARGS_LIMIT, TOOL_RESULT_LIMIT, bounded_args, bounded_text
from shared.reflection.slices import Slice, replay_slice, select_slice
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.messages import stop_payload, summary_payload
from tests.support.transcripts import say

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
GENEROUS = Limits(part_chars=24_000, budget_chars=60_000)


def records_of(payload: PayloadFile) -> list[dict[str, Any]]:
    """Every record of every part, in order, meta records included."""
    return [r for shown in payload.slices for p in shown.parts for r in json.loads(p.read_text())]


def slice_records(log_path: Path, found: Slice) -> list[dict[str, Any]]:
    """What a job shows of ``found``: its one part's records, meta first."""
    payload = write_payload(log_path.parent / "p", "agent-1", [(log_path, found)], limits=GENEROUS)
    return records_of(payload)


def roles(records: list[dict[str, Any]]) -> list[str]:
    return [r["role"] for r in records]


def test_a_user_and_assistant_turn_is_one_slice_ending_at_the_end_of_the_log(
    chat: Conversation,
) -> None:
    u1 = say(chat, "user", "I prefer tabs")
    a1 = say(chat, "assistant", "Noted.")

    found = select_slice(chat.log.path, None)

    assert found is not None
    assert (found.start_id, found.end_id) == (u1.id, a1.id)
    assert found.mode == "unreflected"
    assert found.conversation_id == chat.id
    assert (found.start_offset, found.end_offset) == (0, chat.log.path.stat().st_size)
    assert (found.messages, found.assistant_steps) == (2, 1)


def test_records_open_with_agentd_meta_and_carry_ids_and_millisecond_utc_timestamps(
    chat: Conversation,
) -> None:
    u1 = say(chat, "user", "I prefer tabs")
    a1 = say(chat, "assistant", "Noted.")
    found = select_slice(chat.log.path, None)
    assert found is not None

    records = slice_records(chat.log.path, found)

    meta = records[0]
    assert {k: meta[k] for k in ("role", "source", "conversation_id", "part", "parts")} == {
        "role": "meta",
        "source": "agentd",
        "conversation_id": chat.id,
        "part": 1,
        "parts": 1,
    }
    assert re.fullmatch(r"[0-9a-f]{16}", meta["nonce"])
    assert roles(records) == ["meta", "user", "assistant"]
    assert [r["id"] for r in records[1:]] == [u1.id, a1.id]
    assert [r["content"] for r in records[1:]] == ["I prefer tabs", "Noted."]
    assert all(ISO_MS.fullmatch(r["timestamp"]) for r in records[1:])


def test_a_user_only_slice_starts_and_ends_at_that_message(chat: Conversation) -> None:
    u1 = say(chat, "user", "hello?")

    found = select_slice(chat.log.path, None)

    assert found is not None
    assert found.start_id == found.end_id == u1.id
    assert found.assistant_steps == 0
    assert roles(slice_records(chat.log.path, found)) == ["meta", "user"]


def test_an_assistant_only_fragment_normalises_to_meta_and_assistant(chat: Conversation) -> None:
    say(chat, "assistant", "Good morning.")

    found = select_slice(chat.log.path, None)

    assert found is not None
    assert roles(slice_records(chat.log.path, found)) == ["meta", "assistant"]


def test_tool_results_and_summaries_ride_inside_a_slice_but_never_bound_it(
    chat: Conversation,
) -> None:
    summary = say(
        chat,
        "user",
        "[system alert] summary of earlier talk",
        kind="summary",
        payload=summary_payload(),
    )
    u1 = say(chat, "user", "list files")
    call = ToolCall(id="call-1", name="shell", arguments='{"cmd": "ls"}')
    say(chat, "assistant", tool_calls=[call])
    say(chat, "tool", "a.txt", tool_call_id="call-1", name="shell")
    a2 = say(chat, "assistant", "One file.")
    say(chat, "user", "<memory_update>…", kind="reminder")
    say(
        chat,
        "assistant",
        "cancelled",
        kind="stop",
        stop_reason="cancelled",
        payload=stop_payload("cancelled"),
    )

    found = select_slice(chat.log.path, None)

    assert found is not None
    assert (found.start_id, found.end_id) == (u1.id, a2.id)
    assert found.messages == 5
    assert found.assistant_steps == 2
    records = slice_records(chat.log.path, found)
    assert roles(records) == ["meta", "summary", "user", "assistant", "tool", "assistant"]
    assert records[1]["id"] == summary.id
    assert records[3] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call-1", "name": "shell", "args": '{"cmd": "ls"}'}],
        "timestamp": records[3]["timestamp"],
        "id": records[3]["id"],
    }
    assert {k: records[4][k] for k in ("tool_call_id", "content", "ok")} == {
        "tool_call_id": "call-1",
        "content": "a.txt",
        "ok": True,
    }


def test_reminders_notes_and_stop_records_are_dropped_from_the_records(
    chat: Conversation,
) -> None:
    say(chat, "user", "hi")
    say(chat, "user", "<memory_update>", kind="reminder")
    say(chat, "user", "tool rule broken", kind="note")
    say(chat, "assistant", "error", kind="stop", stop_reason="error", payload=stop_payload())
    say(chat, "assistant", "hello")
    found = select_slice(chat.log.path, None)
    assert found is not None

    assert roles(slice_records(chat.log.path, found)) == ["meta", "user", "assistant"]


def test_an_assistant_message_with_text_and_calls_gives_a_text_and_a_call_record(
    chat: Conversation,
) -> None:
    call = ToolCall(id="c1", name="recall_search", arguments='{"query": "tabs"}')
    say(chat, "assistant", "Let me check.", tool_calls=[call])
    say(chat, "tool", "boom", tool_call_id="c1", is_error=True)
    say(chat, "assistant", "The search failed.")
    found = select_slice(chat.log.path, None)
    assert found is not None

    records = slice_records(chat.log.path, found)

    assert roles(records) == ["meta", "assistant", "assistant", "tool", "assistant"]
    assert records[1]["content"] == "Let me check."
    assert records[2]["content"] is None
    assert records[3]["ok"] is False


def test_selection_starts_after_the_watermark_and_restarts_when_it_is_unknown(
    chat: Conversation,
) -> None:
    u1 = say(chat, "user", "one")
    a1 = say(chat, "assistant", "1")
    u2 = say(chat, "user", "two")
    a2 = say(chat, "assistant", "2")

    after = select_slice(chat.log.path, a1.id)
    unknown = select_slice(chat.log.path, "msg-not-in-this-log")

    assert after is not None and unknown is not None
    assert (after.start_id, after.end_id, after.messages) == (u2.id, a2.id, 2)
    assert (unknown.start_id, unknown.end_id) == (u1.id, a2.id)


def test_tool_results_after_the_last_eligible_message_wait_for_the_next_slice(
    chat: Conversation,
) -> None:
    say(chat, "user", "run it")
    a1 = say(chat, "assistant", tool_calls=[ToolCall(id="c1", name="shell", arguments="{}")])
    result = say(chat, "tool", "done", tool_call_id="c1")

    first = select_slice(chat.log.path, None)
    assert first is not None
    assert (first.end_id, first.messages) == (a1.id, 2)
    assert first.end_offset < chat.log.path.stat().st_size

    a2 = say(chat, "assistant", "Done.")
    second = select_slice(chat.log.path, first.end_id)

    assert second is not None
    assert (second.start_id, second.end_id, second.messages) == (a2.id, a2.id, 2)
    records = slice_records(chat.log.path, second)
    assert roles(records) == ["meta", "tool", "assistant"]
    assert records[1]["id"] == result.id


def test_nothing_eligible_after_the_watermark_gives_no_slice(chat: Conversation) -> None:
    say(chat, "user", "one")
    a1 = say(chat, "assistant", "1")
    say(chat, "user", "<memory_update>", kind="reminder")
    say(chat, "assistant", "interrupted", kind="stop", stop_reason="error", payload=stop_payload())

    assert select_slice(chat.log.path, a1.id) is None
    assert select_slice(chat.log.path, None) is not None


def test_an_empty_or_missing_log_gives_no_slice(chat: Conversation, tmp_path: Path) -> None:
    assert select_slice(chat.log.path, None) is None
    assert select_slice(tmp_path / "nowhere.jsonl", None) is None


def test_until_offset_leaves_later_messages_out_of_the_slice(chat: Conversation) -> None:
    say(chat, "user", "one")
    a1 = say(chat, "assistant", "1")
    boundary = chat.log.path.stat().st_size
    say(chat, "user", "two")
    say(chat, "assistant", "2")

    found = select_slice(chat.log.path, None, until_offset=boundary)

    assert found is not None
    assert (found.end_id, found.end_offset) == (a1.id, boundary)


def test_a_torn_last_line_is_skipped_and_a_line_that_is_no_message_is_shown_as_found(
    chat: Conversation,
) -> None:
    say(chat, "user", "one")
    with open(chat.log.path, "ab") as handle:
        handle.write(b'{"not": "a message"}\n')
    a1 = say(chat, "assistant", "1")
    with open(chat.log.path, "ab") as handle:
        handle.write(b'{"id": "msg-torn", "ro')

    found = select_slice(chat.log.path, None)

    assert found is not None
    assert found.end_id == a1.id
    assert found.messages == 2
    records = slice_records(chat.log.path, found)
    assert roles(records) == ["meta", "user", "unreadable", "assistant"]
    assert (records[2]["content"], records[2]["line"]) == ('{"not": "a message"}', 2)


def test_a_line_that_is_no_message_just_after_the_watermark_is_in_the_next_slice(
    chat: Conversation,
) -> None:
    say(chat, "user", "one")
    a1 = say(chat, "assistant", "1")
    with open(chat.log.path, "ab") as handle:
        handle.write(b"\xff\xfe damaged bytes\n")
    u2 = say(chat, "user", "two")

    found = select_slice(chat.log.path, a1.id)

    assert found is not None and found.start_id == u2.id
    records = slice_records(chat.log.path, found)
    assert roles(records) == ["meta", "unreadable", "user"]
    assert records[1]["content"] == "\ufffd\ufffd damaged bytes"


def test_short_valid_arguments_are_kept_verbatim() -> None:
    assert bounded_args('{"path": "system/human.md"}') == '{"path": "system/human.md"}'
    assert bounded_args("") == "{}"


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"text": "x" * 5_000}),
        json.dumps({"text": "长" * 400}, ensure_ascii=False),
        json.dumps({"text": "\x01" * 400}),
        '{"text": "unterminated',
        "not json at all " * 40,
        "\x00" * 1_000,
    ],
)
def test_tool_arguments_are_bounded_to_300_chars_and_stay_valid_json(raw: str) -> None:
    bounded = bounded_args(raw)

    assert len(bounded) <= ARGS_LIMIT
    parsed = json.loads(bounded)
    assert isinstance(parsed, dict)


def test_a_long_tool_result_is_exactly_2500_chars_with_its_head_and_tail() -> None:
    content = "HEAD-" + "m" * 10_000 + "-TAIL"

    bounded = bounded_text(content)

    assert len(bounded) == TOOL_RESULT_LIMIT
    assert bounded.startswith("HEAD-mmm")
    assert bounded.endswith("mmm-TAIL")
    assert "chars omitted" in bounded


@pytest.mark.parametrize("size", [2_501, 2_530, 12_345, 1_000_000])
def test_tool_results_of_any_length_over_the_limit_are_cut_to_exactly_the_limit(
    size: int,
) -> None:
    assert len(bounded_text("z" * size)) == TOOL_RESULT_LIMIT


def test_a_tool_result_within_the_limit_is_unchanged() -> None:
    assert bounded_text("y" * TOOL_RESULT_LIMIT) == "y" * TOOL_RESULT_LIMIT


def test_payload_records_carry_bounded_arguments_and_results(chat: Conversation) -> None:
    call = ToolCall(id="c1", name="memory_edit", arguments=json.dumps({"new": "x" * 1_000}))
    say(chat, "assistant", tool_calls=[call])
    say(chat, "tool", "r" * 9_000, tool_call_id="c1")
    say(chat, "assistant", "Saved.")
    found = select_slice(chat.log.path, None)
    assert found is not None

    records = slice_records(chat.log.path, found)

    args = records[1]["tool_calls"][0]["args"]
    assert len(args) <= ARGS_LIMIT
    json.loads(args)
    assert len(records[2]["content"]) == TOOL_RESULT_LIMIT


def _one_slice(chat: Conversation, text: str) -> tuple[Path, Slice]:
    say(chat, "user", text)
    say(chat, "assistant", f"re: {text}")
    found = select_slice(chat.log.path, None)
    assert found is not None
    return chat.log.path, found


def test_a_single_slice_payload_is_a_pretty_printed_json_array(
    chat: Conversation, tmp_path: Path
) -> None:
    log_path, found = _one_slice(chat, "I prefer tabs")

    payload = write_payload(tmp_path / "payloads", "agent-1", [(log_path, found)], limits=GENEROUS)

    assert not payload.is_manifest
    assert [shown.slice for shown in payload.slices] == [found]
    assert payload.slices[0].complete
    assert re.fullmatch(r"payload-\d{14}-[0-9a-f]{8}\.json", payload.path.name)
    text = payload.path.read_text()
    assert text.startswith("[\n  {")
    records = json.loads(text)
    assert roles(records) == ["meta", "user", "assistant"]
    assert records[0]["nonce"] == payload.slices[0].nonces[0]
    assert [m.text for m in payload.slices[0].shown] == ["I prefer tabs", "re: I prefer tabs"]
    assert [p.name for p in (tmp_path / "payloads").iterdir()] == [payload.path.name]


def test_two_payloads_never_overwrite_each_other(chat: Conversation, tmp_path: Path) -> None:
    one = [_one_slice(chat, "one")]

    first = write_payload(tmp_path, "agent-1", one, limits=GENEROUS)
    second = write_payload(tmp_path, "agent-1", one, limits=GENEROUS)

    assert first.path != second.path
    assert first.path.exists() and second.path.exists()
    assert first.slices[0].nonces != second.slices[0].nonces


def _conversations(tmp_path: Path, texts: list[str]) -> list[tuple[Path, Slice]]:
    layout = Layout(tmp_path)
    slices = []
    for text in texts:
        chat = Conversation.create(layout, "agent-1", memory_head=None)
        slices.append(_one_slice(chat, text))
    return slices


def test_several_slices_give_one_part_each_and_a_manifest(tmp_path: Path) -> None:
    slices = _conversations(tmp_path, ["one", "two", "three"])

    payload = write_payload(
        tmp_path / "payloads",
        "agent-1",
        slices,
        instruction="focus on preferences",
        limits=GENEROUS,
    )

    assert payload.is_manifest
    assert [shown.slice for shown in payload.slices] == [s for _, s in slices]
    manifest = json.loads(payload.path.read_text())
    assert manifest["schema_version"] == 2
    assert manifest["type"] == MANIFEST_TYPE
    assert manifest["agent_id"] == "agent-1"
    assert manifest["user_instruction"] == "focus on preferences"
    assert ISO_MS.fullmatch(manifest["created_at"])
    for entry, (_, found) in zip(manifest["transcripts"], slices, strict=True):
        assert entry["conversation_id"] == found.conversation_id
        assert (entry["mode"], entry["part"], entry["parts"]) == ("unreflected", 1, 1)
        assert (entry["first_message_id"], entry["last_message_id"]) == (
            found.start_id,
            found.end_id,
        )
        text = part_of(payload, entry).read_text()
        assert entry["approx_chars"] == len(text)
        assert roles(json.loads(text)) == ["meta", "user", "assistant"]
    assert payload.files == [payload.path, *(part_of(payload, t) for t in manifest["transcripts"])]


def part_of(payload: PayloadFile, entry: dict) -> Path:
    """The part a manifest entry names, which it names as the sub-agent's shell sees it:
    under ``/transcript`` in bubblewrap, at its host path where bash runs bare."""
    host = payload.path.parent / Path(entry["payload_path"]).name
    assert entry["payload_path"] == (
        f"/transcript/{host.name}" if sandbox.available() else str(host)
    )
    return host


def test_a_manifest_names_its_parts_by_host_path_where_bash_runs_bare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, "sandbox off"))
    payload = write_payload(
        tmp_path / "payloads", "agent-1", _conversations(tmp_path, ["one", "two"]), limits=GENEROUS
    )
    manifest = json.loads(payload.path.read_text())
    assert [t["payload_path"] for t in manifest["transcripts"]] == [
        str(path) for path in payload.files[1:]
    ]


def test_a_manifest_without_an_instruction_has_no_instruction_key(tmp_path: Path) -> None:
    slices = _conversations(tmp_path, ["a", "b"])
    payload = write_payload(tmp_path / "p", "agent-1", slices, limits=GENEROUS)

    assert "user_instruction" not in json.loads(payload.path.read_text())


def _long_payload(
    chat: Conversation, tmp_path: Path, turns: int, limits: Limits
) -> tuple[list[str], Slice, PayloadFile]:
    """What the user said in ``turns`` turns, the whole unreflected slice, and the payload
    a job with ``limits`` writes of it."""
    said = [f"I always want fact {n} kept, said in turn {n}" for n in range(turns)]
    for text in said:
        say(chat, "user", text)
        say(chat, "assistant", f"noted: {text}")
    found = select_slice(chat.log.path, None)
    assert found is not None
    return said, found, write_payload(tmp_path, "agent-1", [(chat.log.path, found)], limits=limits)


def test_a_slice_larger_than_the_budget_is_cut_after_an_eligible_message(
    chat: Conversation, tmp_path: Path
) -> None:
    said, found, payload = _long_payload(chat, tmp_path, 100, Limits(4_000, 8_000))

    (shown,) = payload.slices
    assert not shown.complete
    assert shown.slice.start_id == found.start_id and shown.slice.end_offset < found.end_offset
    assert shown.slice.end_id == shown.shown[-1].id
    users = [r["content"] for r in records_of(payload) if r["role"] == "user"]
    assert users == said[: len(users)] and 0 < len(users) < 100
    assert sum(len(p.read_text()) for p in shown.parts) <= 8_000 + 600 * len(shown.parts)


def test_every_part_fits_its_limit_and_the_parts_keep_the_order(
    chat: Conversation, tmp_path: Path
) -> None:
    said, _, payload = _long_payload(chat, tmp_path, 60, Limits(3_000, 60_000))

    (shown,) = payload.slices
    assert payload.is_manifest and shown.complete and len(shown.parts) > 3
    assert all(len(p.read_text()) <= 3_000 for p in shown.parts)
    parts = [json.loads(p.read_text()) for p in shown.parts]
    assert [part[0]["part"] for part in parts] == list(range(1, len(parts) + 1))
    assert {part[0]["parts"] for part in parts} == {len(parts)}
    assert [part[0]["nonce"] for part in parts] == shown.nonces
    users = [r["content"] for part in parts for r in part if r["role"] == "user"]
    assert users == said


def test_one_huge_message_is_bounded_to_fit_a_part(chat: Conversation, tmp_path: Path) -> None:
    say(chat, "user", "HEAD " + "x" * 50_000 + " TAIL")
    found = select_slice(chat.log.path, None)
    assert found is not None

    payload = write_payload(
        tmp_path, "agent-1", [(chat.log.path, found)], limits=Limits(4_000, 60_000)
    )

    (shown,) = payload.slices
    assert len(shown.parts) == 1 and len(shown.parts[0].read_text()) <= 4_000
    (message,) = shown.shown
    assert message.text.startswith("HEAD ") and message.text.endswith(" TAIL")
    assert "chars omitted" in message.text


def test_slices_share_the_budget_and_one_that_does_not_fit_is_left_out(tmp_path: Path) -> None:
    big, small, huge = _conversations(tmp_path, ["b" * 3_000, "s", "h" * 9_000])

    payload = write_payload(
        tmp_path / "p", "agent-1", [big, small, huge], limits=Limits(20_000, 7_000)
    )

    assert [shown.slice for shown in payload.slices] == [big[1], small[1]]


def test_the_first_slice_shows_its_first_message_even_over_the_budget(tmp_path: Path) -> None:
    big, small = _conversations(tmp_path, ["b" * 5_000, "s"])

    payload = write_payload(tmp_path / "p", "agent-1", [big, small], limits=Limits(20_000, 100))

    assert [s.slice.end_id for s in payload.slices] == [big[1].start_id]
    assert not payload.slices[0].complete


def test_a_payload_needs_at_least_one_slice(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one slice"):
        write_payload(tmp_path, "agent-1", [], limits=GENEROUS)


def test_a_replay_slice_reaches_back_over_the_last_50_user_turns(chat: Conversation) -> None:
    users = []
    for n in range(60):
        users.append(say(chat, "user", f"u{n}"))
        say(chat, "assistant", f"a{n}")
    last = say(chat, "assistant", "a final word")
    say(chat, "user", "<memory_update>", kind="reminder")

    replay = replay_slice(chat.log.path)

    assert replay is not None
    assert replay.mode == "replay"
    assert (replay.start_id, replay.end_id) == (users[10].id, last.id)
    assert replay.messages == 101
    records = slice_records(chat.log.path, replay)
    assert sum(r["role"] == "user" for r in records) == 50


def test_a_short_conversation_replays_from_its_first_user_message(chat: Conversation) -> None:
    say(chat, "assistant", "welcome")
    u1 = say(chat, "user", "hi")
    a1 = say(chat, "assistant", "hello")

    replay = replay_slice(chat.log.path)

    assert replay is not None
    assert (replay.start_id, replay.end_id) == (u1.id, a1.id)


def test_a_conversation_without_eligible_messages_has_no_replay(chat: Conversation) -> None:
    assert replay_slice(chat.log.path) is None
    say(chat, "user", "summary", kind="summary", payload=summary_payload())
    assert replay_slice(chat.log.path) is None


def test_a_multi_payload_of_reflected_conversations_is_all_replay_slices(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    slices = []
    for text in ["one", "two"]:
        chat = Conversation.create(layout, "agent-1", memory_head=None)
        say(chat, "user", text)
        a1 = say(chat, "assistant", f"re: {text}")
        assert select_slice(chat.log.path, a1.id) is None
        replay = replay_slice(chat.log.path)
        assert replay is not None
        slices.append((chat.log.path, replay))

    payload = write_payload(
        tmp_path / "p", "agent-1", slices, instruction="dedupe", limits=GENEROUS
    )

    manifest = json.loads(payload.path.read_text())
    assert manifest["type"] == MANIFEST_TYPE
    assert manifest["user_instruction"] == "dedupe"
    assert [t["mode"] for t in manifest["transcripts"]] == ["replay", "replay"]
    for entry in manifest["transcripts"]:
        records = json.loads(part_of(payload, entry).read_text())
        assert "user" in roles(records)
