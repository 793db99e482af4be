"""messages.jsonl: append-only, fsync'd, torn tails repaired without losing complete lines."""

from __future__ import annotations

from pathlib import Path

from shared.ids import new_id
from shared.models.messages import Message
from shared.store.jsonl import MessageLog


def _message(text: str) -> Message:
    return Message(id=new_id("msg"), agent_id="a", conversation_id="c", role="user", content=text)


def test_appended_messages_read_back_in_order(tmp_path: Path) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    written = [_message(f"m{i}") for i in range(5)]
    log.append(written[:2])
    log.append(written[2:])
    assert [m.content for m in log] == ["m0", "m1", "m2", "m3", "m4"]


def test_torn_last_line_is_repaired_and_complete_lines_kept(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    log = MessageLog(path)
    log.append([_message("kept 1"), _message("kept 2")])
    torn = _message("torn").to_line()[:25]
    with open(path, "ab") as handle:
        handle.write(torn)

    moved = log.repair_tail()

    assert moved == len(torn)
    assert path.read_bytes().endswith(b"\n")
    assert [m.content for m in log] == ["kept 1", "kept 2"]
    assert (tmp_path / "messages.jsonl.torn").read_bytes() == torn + b"\n"
    log.append([_message("after repair")])
    assert [m.content for m in log] == ["kept 1", "kept 2", "after repair"]


def test_repair_of_a_log_that_is_one_torn_line_leaves_it_empty(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    path.write_bytes(b'{"id": "msg-1", "ro')
    assert MessageLog(path).repair_tail() == len(b'{"id": "msg-1", "ro')
    assert path.read_bytes() == b""


def test_repair_of_an_intact_log_changes_nothing(tmp_path: Path) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    log.append([_message("whole")])
    before = log.path.read_bytes()
    assert log.repair_tail() == 0
    assert log.path.read_bytes() == before
    assert not (tmp_path / "messages.jsonl.torn").exists()


def test_a_complete_but_unreadable_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    log.append([_message("before")])
    with open(log.path, "ab") as handle:
        handle.write(b'{"not": "a message"}\n')
    log.append([_message("after")])
    assert [m.content for m in log] == ["before", "after"]
    assert [m.content for m in log.iter_reversed()] == ["after", "before"]


def test_reverse_iteration_crosses_block_boundaries(tmp_path: Path) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    texts = [f"{i:05d} " + "长文本" * (i % 50) for i in range(3000)]
    log.append([_message(t) for t in texts])
    assert [m.content for m in log.iter_reversed()] == list(reversed(texts))
