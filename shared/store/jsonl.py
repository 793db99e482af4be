"""``messages.jsonl``: every message of a conversation, append-only, one JSON line each.

Why append-only: the log is the truth that recall searches and reflection reads, so it
is never rewritten, not even by compaction (the context window is a separate file).
An append is one ``write`` of complete lines followed by ``fsync``; it reads only the
file's last byte, so its cost does not grow with history.

An append that fails (a full disk writes part of a line, then refuses the rest) is
undone: the log is truncated back to where the append started, so it holds every line
it held before and nothing of the refused messages, and the caller gets
:class:`~shared.errors.DiskFull` saying how many bytes were needed.

A crash can leave a torn last line (a write cut short). :meth:`MessageLog.repair_tail`
detects it on open, moves the fragment to ``messages.jsonl.torn`` for inspection and
truncates the log back to its last complete line: every complete line survives. A last
line that is whole but for its newline (a JSON object: no proper prefix of a line is one)
is a complete line too: the repair adds the newline and keeps it where it is, so recall,
which read it as the message it is, and the log agree on it. Every append checks the same
before writing (one byte read), so a fragment that an undo could not remove is repaired
rather than glued to the next message.
Reading skips (and logs) a complete line that does not parse rather than dropping the
conversation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import structlog
from pydantic import ValidationError

from shared.models.messages import Message
from shared.store.lines import lines_backwards
from shared.store.writes import raise_if_disk_full, write_all

log = structlog.get_logger(__name__)

_BLOCK = 64 * 1024


class MessageLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def repair_tail(self) -> int:
        """End the log with a complete line: a torn last line is cut off, a whole one gets
        its newline. How many bytes were moved aside."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return 0
        try:
            size = os.fstat(fd).st_size
            return max(0, size - self._repair(fd, size))
        finally:
            os.close(fd)

    def _repair(self, fd: int, size: int) -> int:
        """Repair the tail of the log open as ``fd`` (``size`` bytes); its size after."""
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        keep = self._end_of_last_complete_line(fd, size)
        fragment = os.pread(fd, size - keep, keep)
        if is_whole_line(fragment):
            self._terminate(fd, size)
            return size + 1
        torn_path = self.path.with_name(self.path.name + ".torn")
        try:
            with open(torn_path, "ab") as torn:
                torn.write(fragment + b"\n")
                torn.flush()
                os.fsync(torn.fileno())
        except OSError as exc:
            raise_if_disk_full(exc, torn_path, len(fragment) + 1)
            raise
        os.ftruncate(fd, keep)
        os.fsync(fd)
        log.warning("torn_line_repaired", path=str(self.path), bytes=size - keep)
        return keep

    def _terminate(self, fd: int, size: int) -> None:
        """Add the newline a whole last line lacks, at ``size`` (the end)."""
        try:
            os.pwrite(fd, b"\n", size)
            os.fsync(fd)
        except OSError as exc:
            raise_if_disk_full(exc, self.path, 1)
            raise
        log.warning("unterminated_line_completed", path=str(self.path))

    @staticmethod
    def _end_of_last_complete_line(fd: int, size: int) -> int:
        pos = size
        while pos > 0:
            start = max(0, pos - _BLOCK)
            chunk = os.pread(fd, pos - start, start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            pos = start
        return 0

    def append(self, messages: Iterable[Message]) -> list[int]:
        """Append complete lines, fsync them, and return the byte offset of each line.

        All or nothing: if the write or the fsync fails, the log is cut back to where it
        was and the error raised (:class:`~shared.errors.DiskFull` for a full disk). The
        offsets are exact because each log has one writer (the daemon, one turn at a time
        per conversation).
        """
        lines = [m.to_line() for m in messages]
        if not lines:
            return []
        data = b"".join(lines)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            start = self._repair(fd, os.fstat(fd).st_size)
            offsets = []
            offset = start
            for line in lines:
                offsets.append(offset)
                offset += len(line)
            try:
                write_all(fd, data)
                os.fsync(fd)
            except OSError as exc:
                self._undo(fd, start, exc)
                raise_if_disk_full(exc, self.path, len(data))
                raise
        finally:
            os.close(fd)
        return offsets

    def _undo(self, fd: int, start: int, cause: OSError) -> None:
        """Cut the log back to ``start`` after a failed append (shrinking needs no space)."""
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError as exc:
            log.error(
                "failed_append_not_undone",
                path=str(self.path),
                error=str(cause),
                undo_error=str(exc),
                repair=f"the next append or open moves the fragment to {self.path.name}.torn",
            )
            return
        log.warning("failed_append_undone", path=str(self.path), error=str(cause))

    def __iter__(self) -> Iterator[Message]:
        """Every message, oldest first (reads the whole file: not for the turn path)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                message = self._parse(line, number)
                if message is not None:
                    yield message

    def iter_reversed(self) -> Iterator[Message]:
        """Messages newest first, reading backwards block by block.

        Loading a context window walks back only as far as its oldest message, so opening
        a conversation costs the size of its window, not of its history.
        """
        for line in lines_backwards(self.path):
            message = self._parse(line, None)
            if message is not None:
                yield message

    def _parse(self, line: bytes, number: int | None) -> Message | None:
        if not line.strip():
            return None
        try:
            return Message.parse_line(line)
        except ValidationError as exc:
            log.warning(
                "unreadable_message_line",
                path=str(self.path),
                line=number,
                error=exc.errors()[0]["msg"],
            )
            return None


def is_whole_line(tail: bytes) -> bool:
    """Whether ``tail``, the bytes after a log's last newline, is a whole line without its
    newline rather than a fragment: it parses as a JSON object, and no proper prefix of a
    line (one JSON object) does."""
    try:
        return isinstance(json.loads(tail), dict)
    except (ValueError, RecursionError):  # not JSON, not UTF-8; nested too deeply
        return False
