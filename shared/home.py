"""Where an agentd home is, and the two paths the client needs in it before anything else
(the daemon's socket, the REPL's history). Standard library only: ``agentctl`` imports it;
everything else under the home is laid out by :mod:`shared.store.layout`.
"""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_NAME = "agentd.sock"
HISTORY_NAME = "history"


def agentd_home() -> Path:
    """The data directory: ``$AGENTD_HOME``, else ``~/.agentd``."""
    configured = os.environ.get("AGENTD_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".agentd"


def socket_path(home: Path | None = None) -> Path:
    return (home or agentd_home()) / "run" / SOCKET_NAME


def history_path(home: Path | None = None) -> Path:
    """``agentctl chat``'s line history (readline's format; private: it holds what was said)."""
    return (home or agentd_home()) / HISTORY_NAME
