"""One client connection of the daemon: request lines in, answer lines out, and the rules
that keep one misbehaving client from holding up the others.

- **EOF on read means "no more requests", not "cancel".** A client may send its requests
  and half-close (``shutdown(SHUT_WR)``); it still gets every answer.
- **A client that is gone cancels its requests** (that is how agentctl's Ctrl-C stops a
  turn): the socket hung up (the peer closed both directions), a read failed, or a write
  failed. After EOF the socket is polled for the hang-up while answers are pending.
- **A client that stops reading is dropped.** Every line is drained within
  ``write_timeout_s`` (the transport buffers at most its high-water mark plus one line);
  past that the connection is aborted and its requests run on to the log, so a turn never
  holds its conversation's lock because nobody reads its events.
- **An idle connection is closed**: nothing in flight and no request for
  ``idle_timeout_s``.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal

import structlog

from shared.protocol import MAX_REQUEST_BYTES, encode

log = structlog.get_logger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]
Handle = Callable[[bytes | object, Send], Coroutine[Any, Any, None]]

TOO_LONG = object()
"""Stands in for a request line over ``MAX_REQUEST_BYTES``, which was discarded unread."""

_READ_CHUNK = 64 * 1024
_HANGUP_POLL_S = 0.5
"""How often a half-closed connection with answers pending is checked for a hang-up."""


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        handle: Handle,
        *,
        requests: set[asyncio.Task[None]],
        write_timeout_s: float,
        idle_timeout_s: float,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.handle = handle
        self.requests = requests
        """Every request task of the daemon, so a shutdown can wait for them."""
        self.write_timeout_s = write_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._in_flight: set[asyncio.Task[None]] = set()
        self._send_lock = asyncio.Lock()
        self._dropped = False
        self._write_failed = False
        self._last_activity = asyncio.get_running_loop().time()

    async def serve(self) -> None:
        """Read and start requests until the client is done, gone or idle; then answer
        what is pending (unless the client is gone) and close."""
        ended: Literal["eof", "idle", "done", "gone"]
        try:
            ended = await self._read_requests()
        except (ConnectionError, OSError):
            ended = "gone"
        if ended == "eof":
            ended = await self._answer_pending()
        if ended == "gone":
            for task in self._in_flight:
                task.cancel()
        elif ended == "idle":
            log.info("connection_idle_closed", idle_timeout_s=self.idle_timeout_s)
        self.writer.close()

    def close(self) -> None:
        self.writer.close()

    async def send(self, message: dict[str, Any]) -> None:
        """Write one line. Never raises for a client that is gone or dropped: the request
        that sends runs on regardless, and what it does is in the log."""
        async with self._send_lock:
            if self._dropped or self._write_failed or self.writer.is_closing():
                return
            self.writer.write(encode(message))
            if not self.writer.transport.get_write_buffer_size() and not self.writer.is_closing():
                return  # the line went out whole: nothing to wait for (most lines)
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await self.writer.drain()
            except TimeoutError:
                self._drop()
            except (ConnectionError, OSError):
                self._write_failed = True

    async def _read_requests(self) -> Literal["eof", "idle"]:
        lines = _LineReader(self.reader, MAX_REQUEST_BYTES)
        while True:
            try:
                async with asyncio.timeout(self._idle_time_left()):
                    line = await lines.next()
            except TimeoutError:
                if not self._in_flight and self._idle_time_left() <= 0:
                    return "idle"
                continue
            if line is None:
                return "eof"
            self._touch()
            self._start(line)

    async def _answer_pending(self) -> Literal["done", "gone"]:
        while self._in_flight:
            if self._write_failed or self._hung_up():
                return "gone"
            await asyncio.wait(set(self._in_flight), timeout=_HANGUP_POLL_S)
        return "done"

    def _start(self, line: bytes | object) -> None:
        task = asyncio.create_task(self.handle(line, self.send))
        for group in (self._in_flight, self.requests):
            group.add(task)
            task.add_done_callback(group.discard)
        task.add_done_callback(self._touch)

    def _touch(self, _task: object = None) -> None:
        self._last_activity = asyncio.get_running_loop().time()

    def _idle_time_left(self) -> float:
        if self._in_flight:
            return self.idle_timeout_s
        elapsed = asyncio.get_running_loop().time() - self._last_activity
        return max(0.0, self.idle_timeout_s - elapsed)

    def _drop(self) -> None:
        self._dropped = True
        log.warning(
            "connection_dropped",
            reason="not_reading",
            write_timeout_s=self.write_timeout_s,
            requests_running_on=len(self._in_flight),
        )
        self.writer.transport.abort()

    def _hung_up(self) -> bool:
        """True when the peer closed both directions: poll reports POLLHUP on a Unix
        socket then, and only POLLIN (EOF) after a half-close. A socket we closed
        ourselves (dropped, shutting down) is not a hang-up."""
        sock = self.writer.get_extra_info("socket")
        if sock is None or sock.fileno() < 0:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), 0)  # POLLHUP and POLLERR are always reported
        return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


class _LineReader:
    """Newline-delimited frames with a size limit; an oversized line is skipped whole
    (reported as ``TOO_LONG``) and the next line is read normally. Safe to cancel while
    waiting for data (nothing is lost)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self.reader = reader
        self.limit = limit
        self.buffer = bytearray()
        self.discarding = False

    async def next(self) -> bytes | object | None:
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                if self.discarding:
                    self.discarding = False
                    return TOO_LONG
                if line.strip():
                    return line
                continue
            if len(self.buffer) > self.limit:
                self.discarding = True
                self.buffer.clear()
            chunk = await self.reader.read(_READ_CHUNK)
            if not chunk:
                if self.discarding:
                    self.discarding = False
                    return TOO_LONG
                rest, self.buffer = bytes(self.buffer), bytearray()
                return rest if rest.strip() else None
            if self.discarding:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                self.buffer += chunk
                continue
            self.buffer += chunk
