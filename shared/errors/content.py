"""Errors of what an agent holds: a memory file's frontmatter that cannot be read, a
system prompt and tools that leave no room in the window.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class FrontmatterError(AgentdError):
    """A memory file starts a frontmatter block that cannot be read; each caller says what
    that means where it reads one (a hand edit is refused, a plan leaves the file be)."""

    code = "frontmatter"


class PromptFloorError(AgentdError):
    """The system prompt and tools alone leave no room for messages and a reply."""

    code = "prompt_floor"
