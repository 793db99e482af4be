"""The path guard every file tool goes through.

The model names paths freely (relative, ``~``, ``..``, symlinks), so each path is resolved
to its real location *before* it is checked: a check on the spelled path could be walked
around with ``../`` or a symlink. Writes stay inside the agent's own workspace and memory
(never the memory repo's ``.git``, which only git may change); reads may go anywhere except
other parts of agentd's home, where other agents and the daemon's state live.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared.agent.tools.base import ToolContext
from shared.errors import ToolError


def resolve_for_read(path: str, ctx: ToolContext) -> Path:
    """The real path to read, or ``ToolError`` if it is another agent's or the daemon's."""
    real = _resolve(path, ctx)
    home = _real(ctx.home)
    if real.is_relative_to(home) and not _in_own_dirs(real, ctx):
        raise ToolError(
            f"read refused: {real} is inside agentd's home {home}; there you may read only "
            f"your workspace {_real(ctx.workspace)} and memory {_real(ctx.memory_dir)}"
        )
    return real


def resolve_for_write(path: str, ctx: ToolContext) -> Path:
    """The real path to write, or ``ToolError`` unless it is in the workspace or memory."""
    real = _resolve(path, ctx)
    allowed = (
        f"writes are allowed only in your workspace {_real(ctx.workspace)} "
        f"and memory {_real(ctx.memory_dir)} (outside its .git)"
    )
    if real.is_relative_to(_real(ctx.memory_dir) / ".git"):
        raise ToolError(f"write refused: {real} is inside the memory repo's .git; {allowed}")
    if not _in_own_dirs(real, ctx):
        raise ToolError(f"write refused: {real} is outside your directories; {allowed}")
    return real


def memory_relative(path: Path, ctx: ToolContext) -> str | None:
    """``path`` relative to the memory repo (posix), or ``None`` if it is not in memory."""
    real, memory = _real(path), _real(ctx.memory_dir)
    if not real.is_relative_to(memory):
        return None
    return real.relative_to(memory).as_posix()


def _resolve(path: str, ctx: ToolContext) -> Path:
    if not path:
        raise ToolError("path is empty")
    if "\0" in path:
        raise ToolError("path contains a NUL byte")
    expanded = Path(path).expanduser()
    return _real(expanded if expanded.is_absolute() else ctx.workspace / expanded)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _in_own_dirs(real: Path, ctx: ToolContext) -> bool:
    return real.is_relative_to(_real(ctx.workspace)) or real.is_relative_to(_real(ctx.memory_dir))
