"""The MCP server's way to the daemon: agentctl's socket client, a connection per call.

:class:`agentd.client.connection.Connection` blocks, so each call runs in a worker
thread and the server keeps answering the host meanwhile. A connection per call keeps
concurrent calls apart and follows a daemon that restarted between them. A call the
host cancels (``notifications/cancelled``) hangs up its connection, which the daemon
takes as it takes agentctl's Ctrl-C: a turn in flight is cancelled and recorded so.

Failures come back as :class:`DaemonError` (``code: message``, the daemon's typed error,
or ``not_running`` when nothing listens on the socket); the tools and resources turn it
into the MCP error each needs.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import anyio
import anyio.to_thread

from agentd.client.connection import Connection
from shared.errors import ClientError, DaemonError


class Daemon:
    async def result(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The daemon's answer to one request (``None`` values are left out of it)."""
        opened: list[Connection] = []

        def call() -> dict[str, Any]:
            connection = Connection()
            opened.append(connection)
            try:
                return connection.result(op, params)
            finally:
                connection.close()

        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except ClientError as exc:
            raise DaemonError(exc.code, exc.message) from None
        except anyio.get_cancelled_exc_class():
            for connection in opened:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)
            raise
