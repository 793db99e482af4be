"""A tool's failure, told to the model as the tool's result: it never reaches the socket.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class ToolError(AgentdError):
    """Raised by a tool to tell the model what went wrong; never reaches the socket."""

    code = "tool_error"
