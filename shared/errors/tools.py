"""A tool's failure, told to the model as the tool's result: never a daemon error.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations


class ToolError(Exception):
    """Raised by a tool to tell the model what went wrong; never reaches the socket."""
