"""``agentctl agents delete`` and ``agentctl conversations delete``: asked for, then sent.

On a terminal the user is asked ``… [y/N]`` (on stderr, so stdout stays the answer's);
anything but yes deletes nothing. Without
one (a script, a pipe) nothing is asked and ``--yes`` is required, so a script never
deletes by accident nor hangs on a question nobody sees. What is deleted goes to the
trash (the daemon prints where), from which moving it back restores it.
"""

from __future__ import annotations

import argparse
import sys

from agentd.client.connection import Connection


def cmd_agent_delete(conn: Connection, args: argparse.Namespace) -> int:
    agent = conn.result("agent.show", {"agent": args.agent})
    question = f"Delete agent {agent['name']} ({agent['id']}) with its memory and conversations?"
    if not _confirmed(args, question, "agents delete"):
        return 1
    deleted = conn.result("agent.delete", {"agent": agent["id"]})
    print(f"deleted agent {deleted['name']} ({deleted['agent_id']}); moved to {deleted['trash']}")
    return 0


def cmd_conversation_delete(conn: Connection, args: argparse.Namespace) -> int:
    if not args.conversation:
        print("agentctl conversations delete: give the conversation's id", file=sys.stderr)
        return 2
    question = f"Delete conversation {args.conversation} and its messages?"
    if not _confirmed(args, question, "conversations delete"):
        return 1
    params = {"agent": args.agent, "conversation": args.conversation}
    deleted = conn.result("conversation.delete", params)
    print(f"deleted conversation {deleted['conversation_id']}; moved to {deleted['trash']}")
    return 0


def _confirmed(args: argparse.Namespace, question: str, command: str) -> bool:
    """Whether to go ahead; exits 2 when nobody can be asked and ``--yes`` is missing."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(
            f"agentctl {command}: not on a terminal, so nothing can be asked; "
            "pass --yes to delete (it is moved to the trash)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    print(f"{question} It is moved to the trash. [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("nothing deleted", file=sys.stderr)
    return False
