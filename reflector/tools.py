"""The reflection sub-agent's hands: ``bash`` and ``edit_file``, fenced to its memory checkout.

They are the main agent's tools with a different context: the checkout is both the
workspace and the memory dir, so the path guard lets ``edit_file`` write there and nowhere
else, and ``memory_edit`` is a no-op because the sub-agent commits by itself (an edit that
is not committed does not count). The environment names the payload and the ids the
commit trailers need, and like the main agent's it never carries provider keys.

``bash`` cannot be fenced by a path guard, so every command runs in bubblewrap
(:mod:`shared.sandbox`): the job's private clone is the only writable place, shown as
``/memory``, the payload's files are readable under ``/transcript``, and nothing else of
the host is there: no ``$AGENTD_HOME``, no other agent, no parent repo with its hooks,
config, refs and objects, no network, and no name of a host path (the clone holds its
one commit itself, :mod:`shared.memory.clone`). Without bubblewrap the
sub-agent gets no bash unless ``AGENTD_UNSANDBOXED_BASH=1`` says to run it anyway (with a
scrubbed environment and the path guard of ``edit_file`` only); the job then fails with a
reason that says how to fix it.
"""

from __future__ import annotations

from pathlib import Path

from shared import sandbox
from shared.agent.tools.base import Tool, ToolContext, no_memory_edit
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile
from shared.agent.tools.view import MEMORY, TRANSCRIPTS, PathView
from shared.ids import REFLECTION_SUFFIX
from shared.memory.clone import SUBAGENT_NAME
from shared.reflection.payload import PayloadFile
from shared.settings import DEFAULT_BASH_OUTPUT_CHARS


class ReflectionBash(Bash):
    """Bash in the memory checkout, inside bubblewrap when the host allows it."""

    description = (
        "Run bash in $MEMORY_DIR; returns the output (capped). $TRANSCRIPT_PATH, "
        "$MEMORY_DIR, $AGENT_ID and $PARENT_AGENT_ID are set. Background jobs are killed."
    )

    def __init__(self, readable: list[Path]) -> None:
        self.readable = readable
        """The payload's files: all the sandbox shows of the host besides the checkout."""

    def walls(self, ctx: ToolContext) -> sandbox.Walls:
        names = ctx.names()
        binds = [sandbox.Bind(ctx.workspace, names.inside(ctx.workspace), writable=True)]
        binds += [sandbox.Bind(path, names.inside(path)) for path in self.readable]
        return sandbox.Walls(cwd=names.inside(ctx.workspace), binds=tuple(binds))


class ReflectionEditFile(EditFile):
    description = (
        "Replace an exact, unique old_string in a file under $MEMORY_DIR (or every "
        "occurrence with replace_all). The path is literal: no $VARIABLES."
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
    unsandboxed_bash: bool = False,
) -> ToolContext:
    """The context the sub-agent's tools run in: everything points at ``worktree``, which
    it knows as ``/memory`` (and the payload as ``/transcript/…``) in bubblewrap.

    ``unsandboxed_bash`` lets bash run bare where bubblewrap does not work (the host's
    ``AGENTD_UNSANDBOXED_BASH=1``); the sub-agent never gets network."""
    child_id = f"{parent_agent_id}{REFLECTION_SUFFIX}"
    worktree = worktree.absolute()
    view = PathView.of((MEMORY, worktree), (TRANSCRIPTS, payload_path.absolute().parent))
    return ToolContext(
        agent_id=child_id,
        workspace=worktree,
        memory_dir=worktree,
        bash_output_chars=output_chars,
        memory_edit=no_memory_edit,
        bash_unsandboxed=unsandboxed_bash,
        view=view,
        extra_env={
            "TRANSCRIPT_PATH": view.inside(payload_path.absolute()),
            "PARENT_AGENT_ID": parent_agent_id,
            # Its commits name the sub-agent; whatever the model writes instead is
            # replaced as they land (reflector.landing).
            "GIT_AUTHOR_NAME": SUBAGENT_NAME,
            "GIT_AUTHOR_EMAIL": f"{child_id}@agentd.local",
        },
    )
