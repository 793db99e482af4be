"""The reflection sub-agent's hands: ``bash`` and ``edit_file``, fenced to its memory checkout.

They are the main agent's tools with a different context: the checkout is both the
workspace and the memory dir, so the path guard lets ``edit_file`` write there and nowhere
else, and ``memory_edit`` is a no-op because the sub-agent commits by itself (an edit that
is not committed does not count). The environment names the payload and the ids the
commit trailers need, and like the main agent's it never carries provider keys.

``bash`` cannot be fenced by a path guard, so when bubblewrap works on this host every
command runs in a sandbox: the root file system read-only, only the checkout and the
repo's git dir writable (committing from a linked checkout writes objects and refs into
the main repo's git dir), the payload readable, a fresh ``/tmp``, no network. Without
bubblewrap the sub-agent runs with the path guard and the scrubbed environment only;
:func:`sandbox_reason` says why, for ``agentd doctor`` and the logs.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

from shared.agent.tools.base import Tool, ToolContext, no_memory_edit
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile
from shared.ids import REFLECTION_SUFFIX
from shared.providers.base import ToolSchema
from shared.reflection.payload import PayloadFile
from shared.settings import DEFAULT_BASH_OUTPUT_CHARS

PROBE_TIMEOUT_S = 10.0
GIT_TIMEOUT_S = 10.0
AUTHOR_NAME = "Reflection Subagent"


class ReflectionBash(Bash):
    """Bash in the memory checkout, inside bubblewrap when the host allows it."""

    schema = ToolSchema(
        name="bash",
        description=(
            "Run bash in $MEMORY_DIR; returns the output (capped). $TRANSCRIPT_PATH, "
            "$MEMORY_DIR, $AGENT_ID and $PARENT_AGENT_ID are set. Background jobs are killed."
        ),
        parameters=Bash.schema.parameters,
    )

    def __init__(self, readable: list[Path]) -> None:
        self.readable = readable
        """The payload's files: the only things outside the checkout the sandbox shows."""

    def command_prefix(self, ctx: ToolContext) -> list[str]:
        if not sandbox_available():
            return []
        return bwrap_prefix(
            writable=[ctx.workspace, *_git_common_dir(ctx.workspace)],
            readable=self.readable,
            cwd=ctx.workspace,
        )


class ReflectionEditFile(EditFile):
    schema = ToolSchema(
        name="edit_file",
        description=(
            "Replace an exact, unique old_string in a file under $MEMORY_DIR (or every "
            "occurrence with replace_all). The path is literal: no $VARIABLES."
        ),
        parameters=EditFile.schema.parameters,
    )


def reflection_tools(payload: PayloadFile) -> list[Tool]:
    """The sub-agent's only tools; its bash may read ``payload``'s files."""
    return [ReflectionBash(payload.files), ReflectionEditFile()]


def reflection_context(
    *,
    worktree: Path,
    payload_path: Path,
    parent_agent_id: str,
    output_chars: int = DEFAULT_BASH_OUTPUT_CHARS,
) -> ToolContext:
    """The context the sub-agent's tools run in: everything points at ``worktree``."""
    child_id = f"{parent_agent_id}{REFLECTION_SUFFIX}"
    worktree = worktree.absolute()
    return ToolContext(
        agent_id=child_id,
        workspace=worktree,
        memory_dir=worktree,
        home=worktree,
        bash_output_chars=output_chars,
        memory_edit=no_memory_edit,
        extra_env={
            "TRANSCRIPT_PATH": str(payload_path.absolute()),
            "PARENT_AGENT_ID": parent_agent_id,
            # Whatever the model writes, its commits are attributed to the sub-agent.
            "GIT_AUTHOR_NAME": AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": f"{child_id}@agentd.local",
        },
    )


def sandbox_available() -> bool:
    """Whether the sub-agent's bash runs inside bubblewrap on this host."""
    return _probe()[0]


def sandbox_reason() -> str:
    """One line on the sandbox: what it confines, or why it is off."""
    return _probe()[1]


def bwrap_prefix(*, writable: list[Path], readable: list[Path], cwd: Path) -> list[str]:
    """The bubblewrap argv for a command that may write only ``writable``.

    ``--tmpfs /tmp`` comes before the binds: mounted later it would hide any of them
    that live under ``/tmp``. ``--unshare-pid`` makes the sandbox one process tree, so
    killing bubblewrap (timeout, cancelled turn) takes background children with it.
    """
    args = ["bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    for path in readable:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    args += [
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--new-session",
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--chdir",
        str(cwd),
        "--",
    ]
    return args


@functools.cache
def _probe() -> tuple[bool, str]:
    """Try bubblewrap once per process: installed is not enough when user namespaces or
    mounts are forbidden (many containers), and then it fails on every command."""
    path = shutil.which("bwrap")
    if path is None:
        return False, (
            "sandbox off: bubblewrap (bwrap) is not on PATH; the reflection sub-agent's bash "
            "runs with a scrubbed environment only, and only edit_file is path-guarded"
        )
    with tempfile.TemporaryDirectory(prefix="agentd-bwrap-probe-") as scratch:
        probe_dir = Path(scratch)
        argv = bwrap_prefix(writable=[probe_dir], readable=[], cwd=probe_dir)
        try:
            probe = subprocess.run(
                [*argv, "touch", "written"],
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"sandbox off: {path} could not be run: {exc}"
        written = (probe_dir / "written").exists()
    if probe.returncode != 0 or not written:
        detail = probe.stderr.strip() or f"exit code {probe.returncode}, nothing written"
        return False, f"sandbox off: {path} fails on this host ({detail})"
    return True, (
        f"sandbox on: {path} (read-only root, writable memory checkout and git dir, "
        "private /tmp, no network)"
    )


def _git_common_dir(worktree: Path) -> list[Path]:
    """The repo's common git dir when it lies outside ``worktree``: a linked checkout
    commits into the main repo's ``.git``. Empty when there is none to add."""
    try:
        out = subprocess.run(
            ["git", "-C", str(worktree), "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    common = Path(out.stdout.strip())
    if out.returncode != 0 or not common.is_dir() or common.is_relative_to(worktree):
        return []
    return [common]
