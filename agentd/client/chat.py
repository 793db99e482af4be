"""``agentctl chat``: one turn with its events printed as they stream, or the interactive loop.

Apart from the other commands because a turn is the one request that streams events
before its answer, and the interactive loop keeps one connection across many of them.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentd.client.connection import Connection, unwrap
from agentd.client.render import print_event


def _chat_once(conn: Connection, args: argparse.Namespace, text: str) -> int:
    params = {"agent": args.agent, "conversation": args.conversation, "text": text}
    for message in conn.call("chat", params):
        if "event" in message:
            if not args.json:
                print_event(message["event"], message.get("data", {}))
            continue
        result = unwrap(message)
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        stop = result["stop_reason"]
        if stop == "error":
            error = result.get("error") or {}
            print(f"{error.get('code', 'error')}: {error.get('message', '')}", file=sys.stderr)
            return 1
        if stop not in ("end_turn",) and not args.json:
            print(f"  ■ turn stopped: {stop}", file=sys.stderr)
        return 0
    return 1


def cmd_chat(conn: Connection, args: argparse.Namespace) -> int:
    if args.prompt is not None:
        return _chat_once(conn, args, args.prompt)
    status = 0
    while True:
        try:
            text = input("› ")
        except EOFError:
            print()
            return status
        if text.strip() in ("/exit", "/quit"):
            return status
        if text.strip():
            status = _chat_once(conn, args, text)
