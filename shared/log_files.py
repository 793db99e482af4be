"""One rotating log file per process, so rotation never races another writer.

``RotatingFileHandler`` is correct only while one process writes its file: two writers
(two workers, or a worker and the prefork child that inherited its handler) each rename
the file when *their* view of it is full, so lines land in a backup the other just
rotated away, interleave, or are deleted with the oldest backup. Here each process
claims a *slot* — ``<service>.log``, else ``<service>-2.log``, ``-3`` … — by holding an
``flock`` on a hidden lock file beside it for as long as it runs; a slot is reused only
after its holder exits. A forked child gives up the inherited file at the fork (the
parent keeps writing it) and claims a slot of its own when it first logs.
"""

from __future__ import annotations

import fcntl
import io
import itertools
import logging.handlers
import os
import weakref
from pathlib import Path

_open_files: weakref.WeakSet[ProcessLogFile] = weakref.WeakSet()
_inherited_streams: list[io.TextIOWrapper] = []
"""Streams a forked child took over from its parent, kept from being collected."""


def slot_name(service: str, slot: int) -> str:
    """The log file of ``service``'s slot ``slot``: ``agentd.log``, ``reflector-2.log``."""
    return f"{service}.log" if slot == 1 else f"{service}-{slot}.log"


class ProcessLogFile(logging.handlers.RotatingFileHandler):
    """A :class:`RotatingFileHandler` on a file no other live process writes."""

    def __init__(self, directory: Path, service: str, *, max_bytes: int, backups: int) -> None:
        self.directory = directory
        self.service = service
        self._slot_fd: int | None = None
        self._stream_fd = -1
        super().__init__(
            self._claim_slot(),
            maxBytes=max_bytes,
            backupCount=backups,
            encoding="utf-8",
            delay=True,
        )
        _open_files.add(self)

    def _claim_slot(self) -> Path:
        """The first free slot's log path, its lock held until :meth:`close` or exit."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for slot in itertools.count(1):
            name = slot_name(self.service, slot)
            fd = os.open(self.directory / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._slot_fd = fd
            return self.directory / name
        raise AssertionError("unreachable: itertools.count never ends")

    def _open(self) -> io.TextIOWrapper:
        if self._slot_fd is None:  # a forked child's first line: a file of its own
            self.baseFilename = os.path.abspath(self._claim_slot())
        stream = super()._open()
        self._stream_fd = stream.fileno()
        return stream

    def _leave_to_parent(self) -> None:
        """In a forked child: drop the parent's file and slot, with system calls only.

        Nothing here takes a lock a thread of the parent may have held at the fork. The
        inherited stream is neither flushed nor closed: its descriptor is pointed at
        /dev/null (whatever the parent had buffered is never written twice) and the
        object is kept, so that no garbage collection flushes it either.
        """
        if self.stream is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream_fd)
            os.close(devnull)
            _inherited_streams.append(self.stream)
            self.stream = None  # FileHandler's "not opened yet" state
        if self._slot_fd is not None:
            os.close(self._slot_fd)  # the parent's descriptor still holds the lock
            self._slot_fd = None

    def close(self) -> None:
        super().close()
        if self._slot_fd is not None:
            os.close(self._slot_fd)
            self._slot_fd = None


def _after_fork_in_child() -> None:
    for handler in list(_open_files):
        handler._leave_to_parent()


os.register_at_fork(after_in_child=_after_fork_in_child)
