"""The daemon's listening sockets, and the accept loop that keeps within its descriptors.

asyncio's own server accepts every connection waiting in the listen queue at once (up to
its backlog, 1,000 here) before any handler runs, so a burst took a descriptor per client
before one over the cap could be told ``busy``: at a low open-file limit the daemon ran
out, asyncio stopped accepting for a second at a time, and clients waited without an
answer. Here connections are accepted one at a time and one over the cap is answered and
closed before the next is accepted, so a burst holds at most the cap and one more. Should
the process still run out (its turns hold files too), a spare descriptor is given up to
accept the waiting client and tell it ``busy`` rather than leave it hanging.

The same loop serves the Unix socket and the web view's port, each with its own cap, so a
flood of web connections can take no more than the web's share of the open files and the
socket keeps serving. What it logs per refused or failed accept is throttled: a flood is
a few lines a minute, each counting the ones held back, not a line per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Serve = Callable[[socket.socket], Awaitable[None]]
"""Serves one accepted connection until it is done (the socket is the server's to close)."""

ACCEPTS_PER_WAKE = 64
"""Connections accepted per readiness event before the loop serves anything else."""
RETRY_ACCEPT_S = 0.1
"""With no descriptor to spare, how long accepting pauses (the queue keeps the clients)."""
LOG_EVERY_S = 60.0
"""A refused or failed accept is logged at most once a minute per kind and listener."""
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def listen_at(path: Path, *, backlog: int) -> socket.socket:
    """A socket listening on ``path``, private to this user. The listen queue holds as
    many clients as the daemon serves (the kernel caps it at ``somaxconn``): a burst of
    connections waits there to be answered, or refused as ``busy``, instead of being
    turned away unanswered.

    The socket appears at ``path`` already listening and private: it is bound under a
    short temporary name beside it (in the daemon's own 0700 directory), made 0600 and
    renamed into place. Bound at ``path`` itself, a client that found the file between the
    bind and the listen was refused, as if nothing ran there."""
    staging = path.with_name(f".{os.getpid()}")
    staging.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(staging))
        os.chmod(staging, 0o600)
        sock.listen(backlog)
        os.rename(staging, path)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        staging.unlink(missing_ok=True)
        raise
    return sock


class Slots:
    """How many connections may be served at once, and how many are: shared by the
    listeners of one service (the web view may listen on several addresses)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0


class Listener:
    """Accepts on ``sock`` and runs ``serve`` for each connection while ``slots`` has room;
    one over the cap gets ``busy_line`` and is closed at once. ``name`` says which
    listener a log line is about."""

    def __init__(
        self, sock: socket.socket, serve: Serve, *, slots: Slots, busy_line: bytes, name: str
    ) -> None:
        self._sock = sock
        self._serve = serve
        self._slots = slots
        self._busy_line = busy_line
        self._tasks: set[asyncio.Task[None]] = set()
        self._spare: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._log = ThrottledLog(LOG_EVERY_S, listener=name)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._spare = _open_spare()
        self._loop.add_reader(self._sock.fileno(), self._accept_waiting)

    def close(self) -> None:
        """Stop accepting and close the listening socket; connections being served go on."""
        if self._loop is not None and self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
        if self._retry is not None:
            self._retry.cancel()
        self._sock.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    def _accept_waiting(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    self._log.warning("accept_failed", error=str(exc))
                    return
                self._out_of_descriptors()
                return
            if self._slots.open >= self._slots.cap:
                self._log.warning("connection_refused_busy", limit=self._slots.cap)
                self._refuse(conn)
                continue
            self._slots.open += 1
            assert self._loop is not None  # called by the loop start() registered with
            task = self._loop.create_task(self._run(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, conn: socket.socket) -> None:
        try:
            await self._serve(conn)
        except Exception:  # a bug in serving one client: said, and the others go on
            log.exception("connection_crashed")
        finally:
            self._slots.open -= 1

    def _refuse(self, conn: socket.socket) -> None:
        """Say ``busy`` and close: the line fits an empty socket buffer, so it is sent
        whole without waiting. What the client already sent is read first, so the close
        does not reset the connection under the line."""
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(1 << 16)
        with contextlib.suppress(OSError):
            conn.send(self._busy_line)
        conn.close()

    def _out_of_descriptors(self) -> None:
        """Give up the spare descriptor to accept the next client and refuse it; with no
        spare to give, stop accepting for a moment (the readable socket would otherwise
        wake the loop again at once)."""
        self._log.warning("accept_out_of_descriptors", open_connections=self._slots.open)
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            with contextlib.suppress(OSError):
                conn, _ = self._sock.accept()
                self._refuse(conn)
            self._spare = _open_spare()
            return
        assert self._loop is not None
        self._loop.remove_reader(self._sock.fileno())
        self._retry = self._loop.call_later(RETRY_ACCEPT_S, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if self._spare is None:
            self._spare = _open_spare()
        if self._loop is not None and self._sock.fileno() >= 0:
            self._loop.add_reader(self._sock.fileno(), self._accept_waiting)


class ThrottledLog:
    """Warnings at most once per ``interval_s`` per event; the next line that is written
    says how many were held back (``held_back``)."""

    def __init__(
        self, interval_s: float, clock: Callable[[], float] = time.monotonic, **context: Any
    ) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._context = context
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, event: str, **fields: Any) -> None:
        now = self._clock()
        last = self._last.get(event)
        if last is not None and now - last < self._interval_s:
            self._held[event] = self._held.get(event, 0) + 1
            return
        self._last[event] = now
        held = self._held.pop(event, 0)
        log.warning(event, **self._context, **fields, **({"held_back": held} if held else {}))


def raise_open_file_limit() -> int:
    """Raise the open-file soft limit to the hard one (each connection holds a descriptor,
    and the turns need more: logs, git, model calls); the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("open_file_limit_not_raised", soft=soft, hard=hard, error=str(exc))
    return soft


def connection_cap(configured: int, *, share: int, setting: str) -> int:
    """``configured``, or the ``1/share`` of the open files the process may have if that
    is fewer (at least 1); ``setting`` names what the user configured, for the warning."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = min(configured, max(1, soft // share))
    if cap < configured:
        log.warning(
            "max_connections_lowered",
            setting=setting,
            configured=configured,
            cap=cap,
            open_file_limit=soft,
            fix="raise the open-file limit (ulimit -n, LimitNOFILE=) to serve more",
        )
    return cap


def _open_spare() -> int | None:
    """A descriptor held in reserve for :meth:`Listener._out_of_descriptors`, if one is free."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
