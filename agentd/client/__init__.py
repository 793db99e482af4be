"""agentctl: the thin client. Parse arguments, send one request, print, exit.

Imports only the standard library and ``shared``'s standard-library modules (the wire
format, the home, message refs, setting choices; never pydantic, litellm, Celery or git)
so it starts in tens of milliseconds. Exit codes: 0 ok (also when whoever reads stdout
stops reading, as ``agentctl messages | head -1`` does), 1 error (the daemon's typed error
is printed as ``code: message``), 2 usage, 130 interrupted.

Its parts: :mod:`.parser` (the command line), :mod:`.connection` (the socket),
:mod:`.commands` (the request each command sends), :mod:`.chat` (one streamed turn),
:mod:`.repl` (``agentctl chat``'s interactive loop), :mod:`.notes` (``remember`` and
``forget``), :mod:`.render` (how answers look) and :mod:`.times` (how times look and are
read). ``agentctl mcp`` (:mod:`.mcp`) is the exception to "stdlib only": it serves MCP
with the SDK, imported when that command runs, and makes its own connections.
"""

from __future__ import annotations

import os
import sys

from agentd.client.connection import Connection
from agentd.client.parser import parse_args
from shared.errors import ClientError


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not getattr(args, "connects", True):  # ``mcp``: connects per call, itself
            return args.handler(None, args)
        conn = Connection()
        try:
            status = args.handler(conn, args)
        finally:
            conn.close()
        sys.stdout.flush()  # here, not at exit, so a closed stdout is caught below
        return status
    except ClientError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """Whoever read stdout stopped (``| head``): nothing is wrong, so exit 0 quietly. The
    socket's own errors never get here (the connection turns them into ``disconnected``).
    Point stdout at /dev/null, as the Python docs advise for SIGPIPE, or the interpreter's
    last flush at exit fails again and prints "Exception ignored … BrokenPipeError"."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0
