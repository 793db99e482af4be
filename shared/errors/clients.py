"""Errors of the daemon's clients: ``agentctl`` (and its MCP server) printing what a request
met, ``agentd doctor`` finding no daemon to ask.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class DaemonUnanswered(AgentdError):
    """``agentd doctor`` asked the daemon and got no usable answer."""

    code = "daemon_unanswered"


class NotRunning(DaemonUnanswered):
    """No daemon accepts connections on the socket."""

    code = "not_running"


class NoAnswer(DaemonUnanswered):
    """A daemon took the connection but gave no usable answer."""

    code = "no_answer"


class ClientError(AgentdError):
    """A request ``agentctl`` could not get answered: the daemon's error (its code and
    message), or why the daemon could not be asked; printed as ``code: message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class DaemonError(ClientError):
    """The same, met by a tool or resource of ``agentctl mcp``: read as ``code: message``."""

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
