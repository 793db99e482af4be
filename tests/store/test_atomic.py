"""State files: replaced whole or not at all, and a failed write leaves no temp file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from shared.errors import DiskFull
from shared.store.atomic import write_bytes_atomic

_os_write = os.write


def test_a_write_the_disk_refuses_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "context.json"
    write_bytes_atomic(state, b'{"old": true}\n')

    def half_then_full(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 8:
            return _os_write(fd, bytes(data[:8]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(DiskFull) as raised:
        write_bytes_atomic(state, b'{"new": "' + b"x" * 100 + b'"}\n')
    monkeypatch.undo()

    assert state.read_bytes() == b'{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["context.json"]
    assert raised.value.needed == 112


def test_other_write_errors_are_raised_as_they_are_and_leave_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_fd: int, _data: bytes | memoryview) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", broken)
    with pytest.raises(OSError) as raised:
        write_bytes_atomic(tmp_path / "state.json", b"{}\n")
    monkeypatch.undo()

    assert raised.value.errno == errno.EIO
    assert list(tmp_path.iterdir()) == []
