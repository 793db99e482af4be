"""``agentctl remember TEXT`` and ``agentctl forget PATTERN``: a note into memory, lines out.

``remember`` sends the note; the daemon appends it as a ``- `` line (to
``system/human.md`` unless ``--file`` names another file) in one commit.

``forget`` first lists the lines containing PATTERN (nothing changes), then, once the
user says yes (``[y/N]`` on a terminal, ``--yes`` in a script, as for deletes), asks the
daemon to remove exactly those: it sends the memory commit the listing was made at, and
the daemon refuses if the lines matching now are not the ones shown. The removal is one
commit, and the command that undoes it is printed.
"""

from __future__ import annotations

import argparse
import sys

from agentd.client import render
from agentd.client.connection import Connection


def cmd_remember(conn: Connection, args: argparse.Namespace) -> int:
    params = {"agent": args.agent, "text": args.text, "path": args.file, "via": "agentctl"}
    done = conn.result("memory.remember", params)
    if args.json:
        render.print_json(done)
    elif done["commit"] is None:
        print(f"{done['path']} holds this line already; nothing was committed: {done['line']}")
    else:
        print(f"remembered in {done['path']} ({done['commit'][:7]}): {done['line']}")
    return 0


def cmd_forget(conn: Connection, args: argparse.Namespace) -> int:
    params = {"agent": args.agent, "pattern": args.pattern, "path": args.file, "via": "agentctl"}
    listed = conn.result("memory.forget", params)
    lines = listed["lines"]
    if not lines:
        where = f" in {args.file}" if args.file else ""
        print(f'no memory line contains "{args.pattern}"{where}', file=sys.stderr)
        return 1
    if not args.json:
        for line in lines:
            print(f"{line['path']}:{line['line_no']}: {line['text']}", flush=True)
    if not _confirmed(args, len(lines)):
        return 1 if sys.stdin.isatty() else 2
    done = conn.result("memory.forget", {**params, "confirm": True, "base": listed["head"]})
    if args.json:
        render.print_json(done)
        return 0
    count = len(done["lines"])
    commit = done["commit"][:7]
    print(
        f"forgot {count} line{'' if count == 1 else 's'} in {commit}; undo it with "
        f"`agentctl memory revert {commit}`"
    )
    return 0


def _confirmed(args: argparse.Namespace, count: int) -> bool:
    """Whether to remove the ``count`` lines listed; says why not when it is a no."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(
            "agentctl forget: not on a terminal, so nothing can be asked; pass --yes to "
            "remove these lines",
            file=sys.stderr,
        )
        return False
    these = "this line" if count == 1 else f"these {count} lines"
    print(
        f"Forget {these}? One commit removes them; `agentctl memory revert` undoes it. [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("nothing was removed", file=sys.stderr)
    return False
