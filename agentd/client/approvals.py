"""``agentctl approvals``, ``approve`` and ``deny``, and the REPL's question in place.

An answer that completes its step carries the turn on in the same request, so its
events stream and its end is told as ``chat`` tells it (:func:`.chat.ended`: exit 3 when
the carried-on turn waits for approval again). An answer that leaves other calls of the
step waiting says which, and exits 3 too: something still waits for you.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentd.client import render
from agentd.client.chat import EXIT_WAITING, ended, stream
from agentd.client.connection import Connection
from agentd.client.terminal_modes import discard_typeahead
from agentd.client.times import shown
from shared.message_refs import short_id

YES = ("y", "yes")
NO = ("", "n", "no")


def cmd_approvals(conn: Connection, args: argparse.Namespace) -> int:
    waiting = conn.result("approval.list", {"agent": args.agent})["approvals"]
    if args.json:
        render.print_json(waiting)
    else:
        print_approvals(waiting)
    return 0


def cmd_approve(conn: Connection, args: argparse.Namespace) -> int:
    return answer(conn, args.approval, None, approve=True, as_json=args.json)


def cmd_deny(conn: Connection, args: argparse.Namespace) -> int:
    return answer(conn, args.approval, args.reason, approve=False, as_json=args.json)


def answer(
    conn: Connection, approval: str, reason: str | None, *, approve: bool, as_json: bool
) -> int:
    """Send one answer, stream what it carries on; the exit status."""
    op = "approval.approve" if approve else "approval.deny"
    params = {"approval": approval, "reason": reason}
    answered = stream(conn, op, params, as_json=as_json)
    if answered["turn"] is not None:
        return ended(answered["turn"], as_json=as_json)
    if as_json:
        print(json.dumps(answered, ensure_ascii=False))
    else:
        print_still_waiting(answered)
    return EXIT_WAITING


def ask(conn: Connection, waiting: list[dict[str, Any]], *, as_json: bool) -> int:
    """Ask about each call in ``waiting`` in place (``run bash `ls`? [y/N]``) and answer
    it; the turn carries on when the step's last call is answered, and whatever then
    waits is asked about in turn. ``y`` approves; ``n``, nothing or Ctrl-D denies; any
    other text denies with that text as the reason the model is given. Ctrl-C leaves
    the call waiting. Returns the exit status of the last answer."""
    status = EXIT_WAITING
    while waiting:
        call = waiting[0]
        discard_typeahead()  # keys typed for the next prompt answer no question
        try:
            reply = input(question(call))
        except EOFError:
            print()
            reply = "n"
        except KeyboardInterrupt:
            print()
            render.print_waiting(waiting)
            return EXIT_WAITING
        said = reply.strip()
        approve = said.lower() in YES
        reason = None if approve or said.lower() in NO else said
        op = "approval.approve" if approve else "approval.deny"
        answered = stream(conn, op, {"approval": call["id"], "reason": reason}, as_json=as_json)
        turn = answered["turn"]
        if turn is None:
            waiting = answered["waiting"]
            continue
        waiting = turn.get("approvals") or [] if turn["stop_reason"] == "requires_approval" else []
        status = 0 if waiting else ended(turn, as_json=as_json)
    return status


def question(call: dict[str, Any]) -> str:
    """What the REPL asks about a waiting call: ``run bash `rm -rf build`? [y/N] ``."""
    try:
        command = json.loads(call["arguments"]).get("command")
    except (ValueError, AttributeError):
        command = None
    if call["name"] == "bash" and isinstance(command, str):
        return f"run bash `{render.one_line(command)}`? [y/N] "
    return f"run {call['name']}({render.one_line(call['arguments'])})? [y/N] "


def print_still_waiting(answered: dict[str, Any]) -> None:
    """An answer that leaves other calls of its step waiting: the turn goes on when they
    are answered too."""
    call = answered["answered"]
    print(f"{call['state']} {short_id(call['id'])} ({call['name']}); the step's other calls wait:")
    render.print_waiting(answered["waiting"])


def print_approvals(waiting: list[dict[str, Any]]) -> None:
    """One line per waiting call: short id, since when, agent, conversation, turn, call;
    ``no tool call waits for your approval`` on stderr when none."""
    if not waiting:
        print("no tool call waits for your approval", file=sys.stderr)
    for call in waiting:
        print(
            f"{short_id(call['id'])}  {shown(call['since'])}  {call['agent']}  "
            f"{call['conversation_id']}  turn {short_id(call['turn_id'])}  "
            f"{call['name']}({render.one_line(call['arguments'])})"
        )
