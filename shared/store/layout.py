"""Where everything lives under ``$AGENTD_HOME``; the only place ids become paths.

Every method validates the ids it is given, so a path-like id (``../x``, ``a/b``) is an
:class:`shared.errors.InvalidId` before it can touch the file system.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.ids import validate_agent_id, validate_id
from shared.protocol import socket_path


@dataclass(frozen=True)
class Layout:
    home: Path

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def socket_path(self) -> Path:
        return socket_path(self.home)

    @property
    def up_lock(self) -> Path:
        """Held (flock) by the running ``agentd up`` for this home."""
        return self.run_dir / "up.lock"

    @property
    def serve_lock(self) -> Path:
        """Held (flock) by the running ``agentd serve`` for this home."""
        return self.run_dir / "agentd.lock"

    @property
    def valkey_dir(self) -> Path:
        """The embedded Valkey's append-only file: data, so not under ``run/``."""
        return self.home / "valkey"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def agents_dir(self) -> Path:
        return self.home / "agents"

    def agent_dir(self, agent_id: str) -> Path:
        return self.agents_dir / validate_agent_id(agent_id)

    def agent_file(self, agent_id: str) -> Path:
        return self.agent_dir(agent_id) / "agent.json"

    def memory_dir(self, agent_id: str) -> Path:
        return self.agent_dir(agent_id) / "memory"

    def workspace_dir(self, agent_id: str) -> Path:
        return self.agent_dir(agent_id) / "workspace"

    def reflections_dir(self, agent_id: str) -> Path:
        """Outbox, payloads, worktrees, outcome log and backoff of the agent's reflections."""
        return self.agent_dir(agent_id) / "reflections"

    def conversations_dir(self, agent_id: str) -> Path:
        return self.agent_dir(agent_id) / "conversations"

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path:
        return self.conversations_dir(agent_id) / validate_id(conversation_id, "conversation id")
