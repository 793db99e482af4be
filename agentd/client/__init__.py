"""agentctl: the thin client. Parse arguments, send one request, print, exit.

Imports only the standard library and ``shared.protocol`` (never pydantic, litellm,
Celery or git) so it starts in tens of milliseconds. Exit codes: 0 ok, 1 error (the
daemon's typed error is printed as ``code: message``), 2 usage.

Its parts: :mod:`.parser` (the command line), :mod:`.connection` (the socket),
:mod:`.commands` (the request each command sends), :mod:`.chat` (streamed turns and the
interactive loop) and :mod:`.render` (how answers look).
"""

from __future__ import annotations

import sys

from agentd.client.connection import ClientError, Connection
from agentd.client.parser import build_parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        conn = Connection()
        try:
            return args.handler(conn, args)
        finally:
            conn.close()
    except ClientError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except (BrokenPipeError, ConnectionResetError):
        print("disconnected: agentd closed the connection", file=sys.stderr)
        return 1
