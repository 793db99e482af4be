"""Errors of the daemon's own state: stopping, full of connections, its recall
restarting, settings it refuses at start, or a bug of its own (an op that crashed or
answered in the wrong shape).

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class ShuttingDown(AgentdError):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("agentd is shutting down; start it again with `agentd up`")


class Busy(AgentdError):
    """Sent, unasked, on a connection over ``AGENTD_MAX_CONNECTIONS`` before it is closed."""

    code = "busy"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"agentd is serving its limit of {limit:,} connections; try again in a moment, "
            "or raise AGENTD_MAX_CONNECTIONS (and the open-file limit) if that many clients "
            "are expected"
        )


class RecallUnavailable(AgentdError):
    """Recall runs in a process of its own (:mod:`agentd.recall.client`); a request it
    held when that process died is answered with this, and the process is started again."""

    code = "recall_unavailable"

    def __init__(self, why: str) -> None:
        super().__init__(
            f"recall could not answer ({why}); it is restarting: try again in a moment"
        )


class InternalError(AgentdError):
    """A bug, not the caller's doing: an op crashed; the agentd log has the traceback."""

    code = "internal_error"


class InvalidReply(InternalError):
    """An op's handler answered in a shape its reply model (:mod:`agentd.daemon.replies`) does
    not allow; the reply is not sent, the daemon serves on."""


class InvalidSettings(AgentdError):
    """A setting a process refuses at start (:mod:`shared.settings`): the message names
    the variable or the file and key, and the process exits 2."""

    code = "invalid_settings"
