"""Memory files edited in the checkout and not committed: how every place names them.

Such edits hold reflection back (a merge never runs over uncommitted changes) and the
agent does not see them (its prompt is compiled from HEAD), so ``agentctl status``,
``agentd doctor`` and the reflection's ``parent_dirty`` notice all name the files and the
one command that commits them, in the same words.
"""

from __future__ import annotations

SHOWN = 5
"""How many files a notice names; the rest are counted."""


def commit_command(agent: str) -> str:
    """The command that commits ``agent``'s hand edits (an id or a name)."""
    return f"agentctl memory commit --agent {agent}"


def files_named(files: list[str]) -> str:
    """``a.md, b.md and 3 more``."""
    more = f" and {len(files) - SHOWN} more" if len(files) > SHOWN else ""
    return ", ".join(files[:SHOWN]) + more


def uncommitted_notice(agent: str, files: list[str]) -> str:
    return (
        f"uncommitted memory edits ({files_named(files)}): the agent does not see them and "
        f"reflection waits; commit them with `{commit_command(agent)}`"
    )
