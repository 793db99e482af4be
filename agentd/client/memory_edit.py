"""``agentctl memory edit PATH``: edit one memory file in ``$VISUAL``/``$EDITOR`` and commit it.

The editor works on a temporary copy of the committed text, never on the checkout, so a
turn or a reflection merging meanwhile never sees a half-edited file. The result goes
to the daemon with the blob it started from; the daemon writes and commits it as the
user under the memory lock, or refuses it if the file changed meanwhile. Nothing is sent
when the editor fails or nothing changed. A refused text is kept in a file whose path is
printed, so no typing is lost.

``subprocess`` and ``tempfile`` are imported by the functions that use them: agentctl's
every other command starts without them (a tenth of its start-up).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path, PurePosixPath

from agentd.client.connection import Connection
from shared.errors import ClientError

FALLBACK_EDITOR = "vi"


def cmd_memory_edit(conn: Connection, args: argparse.Namespace) -> int:
    if not args.path:
        print("agentctl memory edit: give the file to edit, e.g. system/human.md", file=sys.stderr)
        return 2
    import tempfile

    start = conn.result("memory.read", {"agent": args.agent, "path": args.path})
    path = start["path"]
    with tempfile.TemporaryDirectory(prefix="agentctl-edit-") as scratch:
        copy = Path(scratch) / PurePosixPath(path).name
        copy.write_text(start["text"], encoding="utf-8")
        status = run_editor(copy)
        if status != 0:
            print(f"the editor exited with status {status}; nothing was committed", file=sys.stderr)
            return 1
        text = copy.read_text(encoding="utf-8")
    if text == start["text"]:
        print(f"{path} is unchanged; nothing to commit")
        return 0
    params = {
        "agent": args.agent,
        "path": path,
        "text": text,
        "base": start["blob"],
        "message": args.message,
    }
    try:
        commit = conn.result("memory.write", params)["commit"]
    except ClientError:
        print(f"your text is kept in {_keep(text, path)}", file=sys.stderr)
        raise
    print(f"committed {commit[:7]} ({path})" if commit else "nothing to commit")
    return 0


def run_editor(file: Path) -> int:
    """Run the user's editor on ``file`` and return its exit status. The variable may hold
    arguments too (``code --wait``), so it runs through the shell, as git runs it."""
    import subprocess

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or FALLBACK_EDITOR
    return subprocess.run(["sh", "-c", f'{editor} "$@"', editor, str(file)], check=False).returncode


def _keep(text: str, path: str) -> str:
    import tempfile

    fd, kept = tempfile.mkstemp(prefix="agentctl-edit-", suffix=f"-{PurePosixPath(path).name}")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return kept
