"""messages.jsonl: append-only, fsync'd, torn tails repaired without losing complete lines,
and an append the disk refuses undone."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from shared.errors import DiskFull
from shared.ids import new_id
from shared.models.messages import Message
from shared.store.jsonl import MessageLog, lines_backwards


def _message(text: str) -> Message:
    return Message.of(
        id=new_id("msg"), agent_id="a", conversation_id="c", role="user", content=text
    )


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


def test_a_whole_last_line_without_its_newline_is_completed_and_kept_where_it_is(
    tmp_path: Path,
) -> None:
    path = tmp_path / "messages.jsonl"
    log = MessageLog(path)
    log.append([_message("kept 1")])
    whole = _message("whole but unterminated").to_line().removesuffix(b"\n")
    with open(path, "ab") as handle:
        handle.write(whole)
    size = path.stat().st_size

    offsets = log.append([_message("next")])

    assert offsets == [size + 1], "the next line starts after the added newline"
    assert [m.content for m in log] == ["kept 1", "whole but unterminated", "next"]
    assert not (tmp_path / "messages.jsonl.torn").exists()
    assert log.repair_tail() == 0


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


def test_lines_before_an_offset_come_back_whole_even_when_longer_than_a_block(
    tmp_path: Path,
) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    texts = ["short", "长" * 100_000, "middle", "x" * 200_000, "last"]
    offsets = log.append([_message(t) for t in texts])
    raw = log.path.read_bytes()
    lines = raw.splitlines(keepends=True)

    assert list(lines_backwards(log.path)) == lines[::-1]
    assert list(lines_backwards(log.path, offsets[3])) == lines[:3][::-1]
    assert list(lines_backwards(log.path, 0)) == []
    assert list(lines_backwards(tmp_path / "missing.jsonl")) == []


_os_write = os.write


class _DiskFillsMidWrite:
    """``os.write`` for the log: writes ``room`` bytes, then refuses with ENOSPC."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, fd: int, data: bytes | memoryview) -> int:
        if self.room == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = _os_write(fd, bytes(data[: self.room]))
        self.room -= written
        return written


def test_an_append_cut_short_by_a_full_disk_is_undone_and_says_what_it_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    log.append([_message("kept")])
    before = log.path.read_bytes()
    refused = [_message("refused " * 100), _message("also refused")]
    monkeypatch.setattr(os, "write", _DiskFillsMidWrite(room=40))

    with pytest.raises(DiskFull) as raised:
        log.append(refused)

    assert log.path.read_bytes() == before
    assert raised.value.code == "disk_full"
    assert raised.value.needed == sum(len(m.to_line()) for m in refused)
    assert f"needs {raised.value.needed:,} bytes" in raised.value.message
    monkeypatch.undo()
    offsets = log.append([_message("next")])
    assert offsets == [len(before)]
    assert [m.content for m in log] == ["kept", "next"]


def test_a_fragment_the_undo_could_not_remove_is_moved_aside_before_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    log.append([_message("kept")])
    monkeypatch.setattr(os, "write", _DiskFillsMidWrite(room=30))
    monkeypatch.setattr(os, "ftruncate", _refuse_io)
    with pytest.raises(DiskFull):
        log.append([_message("refused")])
    monkeypatch.undo()
    assert not log.path.read_bytes().endswith(b"\n")

    log.append([_message("next")])

    assert [m.content for m in log] == ["kept", "next"]
    assert len(log.path.read_bytes().splitlines()) == 2
    assert (tmp_path / "messages.jsonl.torn").stat().st_size == 31


def test_a_failed_fsync_undoes_the_append_and_raises_the_os_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = MessageLog(tmp_path / "messages.jsonl")
    log.append([_message("kept")])
    before = log.path.read_bytes()
    real_fsync = os.fsync
    calls: list[int] = []

    def fsync_fails_once(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            _refuse_io()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_fails_once)
    with pytest.raises(OSError) as raised:
        log.append([_message("not durable")])
    monkeypatch.undo()
    assert raised.value.errno == errno.EIO
    assert log.path.read_bytes() == before


def _refuse_io(*_args: object) -> None:
    raise OSError(errno.EIO, "Input/output error")
