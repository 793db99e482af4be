"""The root of agentd's error tree: what every error a caller may see carries.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations


class AgentdError(Exception):
    """Base of every error agentd reports to a caller. Catch this at process boundaries."""

    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
