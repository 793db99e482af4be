"""One chat turn, its events printed as they stream, then how it ended.

Apart from the other commands because a turn is the one request that streams events
before its answer; ``agentctl chat -p`` sends one, the interactive loop (:mod:`.repl`)
one per line.
"""

from __future__ import annotations

import json
import sys

from agentd.client.connection import Connection, unwrap
from agentd.client.render import print_event


def stream_turn(
    conn: Connection, agent: str | None, conversation: str | None, text: str, *, as_json: bool
) -> int:
    """Run one turn; 1 when it stopped on an error (printed as ``code: message``)."""
    params = {"agent": agent, "conversation": conversation, "text": text}
    for message in conn.call("chat", params):
        if "event" in message:
            if not as_json:
                print_event(message["event"], message.get("data", {}))
            continue
        result = unwrap(message)
        if as_json:
            print(json.dumps(result, ensure_ascii=False))
        stop = result["stop_reason"]
        if stop == "error":
            error = result.get("error") or {}
            print(f"{error.get('code', 'error')}: {error.get('message', '')}", file=sys.stderr)
            return 1
        if stop not in ("end_turn",) and not as_json:
            print(f"  ■ turn stopped: {stop}", file=sys.stderr)
        return 0
    return 1
