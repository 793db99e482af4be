"""agentctl's side of the socket protocol: one connection, requests out, answer lines in.

Apart from the commands so that every command, the chat loop and the tests that talk to
a daemon the way agentctl does share one way of reaching the daemon, matching answers to
requests and turning a typed error into :class:`ClientError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
from collections.abc import Iterator
from typing import Any

from shared import home, protocol
from shared.errors import ClientError

NOT_RUNNING = "not_running"
DISCONNECTED = "disconnected"


class Connection:
    def __init__(self) -> None:
        self._open()
        self._next_id = 0

    def _open(self) -> None:
        """Connect, or raise ``not_running``; a failed attempt leaves the connection
        closed, so the next request tries again instead of using a dead socket."""
        path = home.socket_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise ClientError(
                NOT_RUNNING,
                f"agentd is not running (no daemon on {path}). Start it with `agentd up` "
                "(from a checkout: `make up`), then try again.",
            ) from None
        self.sock = sock
        self.reader = sock.makefile("rb")

    def call(self, op: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Send one request; yield its event lines, then its final line."""
        if self.sock.fileno() < 0 or self._closed_by_daemon():
            self.close()
            self._open()
        self._next_id += 1
        request_id = f"c{os.getpid()}-{self._next_id}"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it said why
            self.sock.sendall(protocol.request(request_id, op, _drop_none(params or {})))
        for message in self._messages():
            if message.get("id") not in (request_id, None):
                continue
            yield message
            if "ok" in message:
                return
        raise ClientError(DISCONNECTED, "agentd closed the connection before answering")

    def _messages(self) -> Iterator[dict[str, Any]]:
        """The daemon's lines until it closes; a reset socket is the daemon gone too. Only
        the socket's errors become ``disconnected``: a closed stdout is not the daemon's."""
        try:
            for raw in self.reader:
                yield json.loads(raw)
        except ConnectionResetError:
            raise ClientError(
                DISCONNECTED, "agentd reset the connection before answering"
            ) from None

    def result(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        for message in self.call(op, params):
            if "ok" in message:
                return unwrap(message)
        raise AssertionError("call() always ends with a final line")

    def _closed_by_daemon(self) -> bool:
        """Between requests nothing is due, so a readable socket has reached its end: the
        daemon closes a connection idle for ``AGENTD_IDLE_TIMEOUT_S``, and the interactive
        chat is idle while its user types."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        """Close quietly: the answer is in, and a daemon that is stopping may have reset
        the connection already."""
        with contextlib.suppress(OSError):
            self.reader.close()
            self.sock.close()


def unwrap(message: dict[str, Any]) -> dict[str, Any]:
    """A final line's result, or its typed error raised as :class:`ClientError`."""
    if message["ok"]:
        return message["result"]
    error = message.get("error") or {}
    raise ClientError(error.get("code", "error"), error.get("message", "unknown error"))


def _drop_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}
