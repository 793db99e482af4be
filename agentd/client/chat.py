"""One chat turn, its events printed as they stream, then how it ended.

Apart from the other commands because a turn is the one request that streams events
before its answer; ``agentctl chat -p`` sends one, the interactive loop (:mod:`.repl`)
one per line, and ``agentctl approve``/``deny`` (:mod:`.approvals`) carry one on.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentd.client.connection import Connection, unwrap
from agentd.client.live import TurnView
from agentd.client.render import print_waiting

EXIT_WAITING = 3
"""The exit status when the turn stopped on a tool call that waits for the user's yes."""


def stream(conn: Connection, op: str, params: dict[str, Any], *, as_json: bool) -> dict[str, Any]:
    """Send one request, print its events as they come (not with ``--json``), return its
    result; a typed error is raised (:class:`~.ClientError`). The reply's text
    is printed as it is written, and a terminal is shown how long the model is waited on
    (:mod:`.live`)."""
    view = None if as_json else TurnView(show_waiting=sys.stderr.isatty())
    try:
        for message in conn.call(op, params):
            if "event" in message:
                if view is not None:
                    view.event(message["event"], message.get("data", {}))
                continue
            return unwrap(message)
    finally:
        if view is not None:
            view.close()
    raise AssertionError("call() always ends with a final line")


def stream_turn(
    conn: Connection, agent: str | None, conversation: str | None, text: str, *, as_json: bool
) -> int:
    """Run one turn; its exit status (:func:`ended`)."""
    params = {"agent": agent, "conversation": conversation, "text": text}
    return ended(stream(conn, "chat", params, as_json=as_json), as_json=as_json)


def ended(result: dict[str, Any], *, as_json: bool) -> int:
    """How a turn ended, printed; 1 when it stopped on an error (printed as ``code:
    message``), :data:`EXIT_WAITING` when a call waits for approval (what waits and how
    to answer it printed on stderr), else 0."""
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
    stop = result["stop_reason"]
    if stop == "error":
        error = result.get("error") or {}
        print(f"{error.get('code', 'error')}: {error.get('message', '')}", file=sys.stderr)
        return 1
    if stop == "requires_approval":
        if not as_json:
            print_waiting(result.get("approvals") or [])
        return EXIT_WAITING
    if stop not in ("end_turn",) and not as_json:
        print(f"  ■ turn stopped: {stop}", file=sys.stderr)
    return 0
