"""``agentctl mcp``: the MCP server (:mod:`agentd.mcp`), started only by this command.

The ``mcp`` SDK (and pydantic, anyio, starlette under it) takes most of a second to
import; agentctl's other commands start in tens of milliseconds and must not pay for it,
so it is imported here, when the command runs, and nowhere else in the client.
"""

from __future__ import annotations

import argparse


def cmd_mcp(_conn: None, args: argparse.Namespace) -> int:
    from agentd.mcp.server import serve  # the slow import: here, not at the top

    return serve(default_agent=args.agent)
