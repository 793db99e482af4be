"""Where everything lives under ``$AGENTD_HOME``: the only place ids become paths, and the
only place a file or directory of agentd's is named.

Every method validates the ids it is given, so a path-like id (``../x``, ``a/b``) is an
:class:`shared.errors.InvalidId` before it can touch the file system. Code that works
inside one directory it was handed (a conversation's, an agent's reflections) names its
files through :class:`ConversationFiles` and :class:`ReflectionFiles`, so a rename is one
line here and a test keeps the names out of every other module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.home import socket_path
from shared.ids import validate_agent_id, validate_id


@dataclass(frozen=True)
class ConversationFiles:
    """The files of one conversation's directory."""

    directory: Path

    @property
    def messages(self) -> Path:
        """The append-only log of every message, kept forever."""
        return self.directory / "messages.jsonl"

    @property
    def record(self) -> Path:
        return self.directory / "conversation.json"

    @property
    def context(self) -> Path:
        """The context window's message ids and its latest usage."""
        return self.directory / "context.json"

    @property
    def compaction_event(self) -> Path:
        """Written by a compaction, consumed by the ``compaction-event`` trigger."""
        return self.directory / "compaction-event.json"

    @property
    def reflection_state(self) -> Path:
        return self.directory / "reflection-state.json"

    @property
    def approvals(self) -> Path:
        """The latest step that waited for the user's approval (``WaitingStep``)."""
        return self.directory / "approvals.json"

    @property
    def reflection_state_lock(self) -> Path:
        return self.directory / "reflection-state.lock"


@dataclass(frozen=True)
class ReflectionFiles:
    """The files of one agent's ``reflections/`` directory."""

    directory: Path

    @property
    def outbox(self) -> Path:
        """Requests on their way to the workers (one sent, one pending)."""
        return self.directory / "outbox"

    @property
    def payloads(self) -> Path:
        return self.directory / "payloads"

    @property
    def worktrees(self) -> Path:
        """The daemon's clones of a job: a worker's commits received and checked, or a
        proposal the agent reviews in explicit merge mode."""
        return self.directory / "worktrees"

    @property
    def subagents(self) -> Path:
        """The reflection sub-agents' own conversations, as their workers sent them back."""
        return self.directory / "subagents"

    @property
    def integrations(self) -> Path:
        """The agent's integration conversations (explicit merge mode)."""
        return self.directory / "integrations"

    @property
    def proposals(self) -> Path:
        """Reflections held for the user (one record per proposal; the commits are under
        ``refs/proposals/`` in the memory repo)."""
        return self.directory / "proposals"

    @property
    def outcome_log(self) -> Path:
        return self.directory / "log.jsonl"

    @property
    def outcome_log_lock(self) -> Path:
        return self.directory / "log.lock"

    @property
    def backoff(self) -> Path:
        return self.directory / "backoff.json"

    @property
    def backoff_lock(self) -> Path:
        return self.directory / "backoff.lock"

    @property
    def idle_marks(self) -> Path:
        """The conversations the idle sweep already asked about."""
        return self.directory / "idle-sweep.json"


@dataclass(frozen=True)
class RecallFiles:
    """The agent's persisted recall index (tantivy's files, and which analyzer made them):
    a cache of its logs, rebuilt from them if lost."""

    directory: Path

    @property
    def format(self) -> Path:
        """Which format and analyzer the index's files were written with."""
        return self.directory / "format.json"


@dataclass(frozen=True)
class AgentFiles:
    """The files of one agent's directory (also for a directory found by a scan, whose
    name is not yet known to be a valid id)."""

    directory: Path

    @property
    def record(self) -> Path:
        return self.directory / "agent.json"

    @property
    def memory(self) -> Path:
        return self.directory / "memory"

    @property
    def workspace(self) -> Path:
        return self.directory / "workspace"

    @property
    def reflections(self) -> ReflectionFiles:
        return ReflectionFiles(self.directory / "reflections")

    @property
    def conversations(self) -> Path:
        return self.directory / "conversations"

    @property
    def token_ratios(self) -> Path:
        """Provider tokens per estimated token, learned per model (a cache: relearned if lost)."""
        return self.directory / "token-ratios.json"

    @property
    def recall(self) -> RecallFiles:
        return RecallFiles(self.directory / "recall")

    @property
    def api_clients(self) -> Path:
        """Which conversation each client of the OpenAI-compatible endpoint talks in."""
        return self.directory / "api-clients.json"


@dataclass(frozen=True)
class ArchiveFiles:
    """The members of an export archive besides the agent's own files (its record and its
    conversations' files keep the names :class:`AgentFiles` gives them)."""

    directory: Path

    @property
    def manifest(self) -> Path:
        """What the archive holds: format version, agent id, conversations, sizes."""
        return self.directory / "manifest.json"

    @property
    def memory_bundle(self) -> Path:
        """The memory repo's ``main`` branch as a git bundle (its whole history)."""
        return self.directory / "memory.bundle"


def memory_lock(memory_dir: Path) -> Path:
    """The memory lock of the repo at ``memory_dir``: beside it, so never untracked in it."""
    return memory_dir.parent / "memory.lock"


@dataclass(frozen=True)
class Layout:
    home: Path

    @property
    def config_file(self) -> Path:
        """``agentd.toml``: settings, provider keys among them."""
        return self.home / "agentd.toml"

    @property
    def api_keys(self) -> Path:
        """The OpenAI-compatible endpoint's bearer keys, hashed (``agentctl api-key``)."""
        return self.home / "api-keys.json"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def socket_path(self) -> Path:
        return socket_path(self.home)

    @property
    def embedded_redis_socket(self) -> Path:
        return self.run_dir / "valkey.sock"

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

    @property
    def trash_dir(self) -> Path:
        """Deleted agents and conversations, moved here whole (``<time>-<id>``), never erased."""
        return self.home / "trash"

    @property
    def staging_dir(self) -> Path:
        """Exports and imports being built: inside the home, so the finished directory is
        renamed into ``agents/`` atomically."""
        return self.home / "staging"

    def upload_file(self, upload_id: str) -> Path:
        """An import archive on its way in from agentctl, piece by piece."""
        return self.staging_dir / f"{validate_id(upload_id, 'upload id')}.upload"

    def agent_dir(self, agent_id: str) -> Path:
        return self.agents_dir / validate_agent_id(agent_id)

    def agent_files(self, agent_id: str) -> AgentFiles:
        return AgentFiles(self.agent_dir(agent_id))

    def agent_file(self, agent_id: str) -> Path:
        return self.agent_files(agent_id).record

    def memory_dir(self, agent_id: str) -> Path:
        return self.agent_files(agent_id).memory

    def workspace_dir(self, agent_id: str) -> Path:
        return self.agent_files(agent_id).workspace

    def reflections_dir(self, agent_id: str) -> Path:
        """Outbox, payloads, worktrees, outcome log and backoff of the agent's reflections."""
        return self.reflection_files(agent_id).directory

    def reflection_files(self, agent_id: str) -> ReflectionFiles:
        return self.agent_files(agent_id).reflections

    def recall_files(self, agent_id: str) -> RecallFiles:
        return self.agent_files(agent_id).recall

    def conversations_dir(self, agent_id: str) -> Path:
        return self.agent_files(agent_id).conversations

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path:
        return self.conversations_dir(agent_id) / validate_id(conversation_id, "conversation id")

    def conversation_files(self, agent_id: str, conversation_id: str) -> ConversationFiles:
        return ConversationFiles(self.conversation_dir(agent_id, conversation_id))


@dataclass(frozen=True)
class JobLayout(Layout):
    """Conversations of a reflection's sub-agent or of an integration sit flat in one
    directory, ``<home>/<conversation id>``; the agents tree of :class:`Layout` has no
    place for ``~reflection`` ids."""

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path:
        validate_agent_id(agent_id, allow_reflection=True)
        return self.home / validate_id(conversation_id, "conversation id")
