"""The socket's replies, one pydantic model per op (:mod:`agentd.daemon.ops` pairs each op with
its request model, its handler and one of these).

A handler returns its reply model; the daemon checks it against the op's model before
it sends it (:func:`agentd.daemon.ops.reply_of`), so a handler that answers in the wrong shape
is an ``internal_error`` the log explains, not a line the client misreads. Field order is
the wire's key order (``agentctl`` reads these with the standard library only): keep it.

A reply's parts that other modules already shape as JSON (a message's ``to_api``, a
commit's provenance, a waiting call's view) are typed as JSON objects here; their own
modules say what is in them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from shared.models.agents import AgentRecord
from shared.models.events import ReflectionTold
from shared.models.turns import TurnResult

JsonObject = dict[str, Any]
"""A JSON object shaped by another module (:func:`shared.models.messages.Message.to_api`,
a ``model_dump(mode="json")``)."""


class Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class Hello(Reply):
    service: Literal["agentd"] = "agentd"
    version: str
    protocol: int
    pid: int


class WebLogin(Reply):
    url: str
    expires_s: float
    loopback: bool


class RecallProcess(Reply):
    pid: int | None
    calls_waiting: int


class Status(Reply):
    version: str
    pid: int
    uptime_s: float
    home: str
    socket: str
    model: str
    ready: bool
    active_turns: int
    connections: int
    redis: JsonObject
    """:func:`agentd.daemon.status.redis_status` (``error`` only when Redis did not answer)."""
    idle_sweep: JsonObject
    recall_process: RecallProcess
    agents: list[JsonObject]
    """:func:`agentd.daemon.status.agent_status` of each agent, with its recall index's state."""


class AgentView(AgentRecord):
    """An agent as the socket shows it: its record and what it runs with."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    effective_model: str
    model_is_default: bool
    memory_dir: str


class AgentList(Reply):
    agents: list[AgentView]


class AgentImported(AgentView):
    conversations: int
    memory_head: str


class ApprovalList(Reply):
    approvals: list[JsonObject]
    """Each waiting call's view (:func:`shared.store.approvals.view`) with its agent's name."""


class ApprovalAnswered(Reply):
    answered: JsonObject
    waiting: list[JsonObject]
    """The step's calls still waiting; empty once the turn carried on."""
    turn: TurnResult | None
    """The turn the last answer carried on (None while calls still wait)."""


class ReflectionSettingsShown(Reply):
    """An agent's reflection settings, as ``agentctl sleeptime`` shows them."""

    trigger: str
    step_count: int = Field(alias="stepCount")
    merge: str
    merge_instructions: str | None = Field(
        default=None, alias="mergeInstructions", exclude_if=lambda value: value is None
    )


class ReflectionQueued(Reply):
    request_id: str
    queued: bool
    outcome: ReflectionTold | None
    """Told if it came within the request's ``wait_s``."""


class ReflectionList(Reply):
    agent_id: str
    reflections: list[ReflectionTold]


class ConversationList(Reply):
    agent_id: str
    conversations: list[JsonObject]


class MessagesPage(Reply):
    agent_id: str
    conversation_id: str
    messages: list[JsonObject]


class MessagesNear(Reply):
    agent_id: str
    messages: list[JsonObject]


class ContextShown(Reply):
    """The next request's budget (:meth:`shared.context.budget.Budget.to_dict`)."""

    agent_id: str
    conversation_id: str
    model: str
    window: int
    threshold: int
    system_tokens: int
    tools_tokens: int
    floor: int
    messages: int
    messages_tokens: int
    request_tokens: int
    anchored: bool
    token_ratio: float
    window_source: str | None
    window_setting: str | None
    last_compaction: JsonObject | None


class RecallHits(Reply):
    agent_id: str
    hits: list[JsonObject]
    incomplete: str | None
    """Why the hits may be partial (an index still catching up), if they may."""


class MemoryCommits(Reply):
    agent_id: str
    commits: list[JsonObject]


class MemoryPath(Reply):
    agent_id: str
    path: str


class MemoryFile(Reply):
    agent_id: str
    path: str
    text: str


class MemoryFiles(Reply):
    agent_id: str
    files: dict[str, str]


class MemoryShown(RootModel[MemoryFile | MemoryFiles]):
    """One file's text (a path was asked), or every file's."""


class MemoryCommitted(Reply):
    agent_id: str
    commit: str | None
    """None: nothing was left to commit."""


class MemoryEditable(Reply):
    agent_id: str
    path: str
    text: str
    blob: str | None


class MemoryWritten(Reply):
    agent_id: str
    path: str
    commit: str | None


class Blamed(Reply):
    agent_id: str
    path: str
    lines: list[JsonObject]


class WhyFound(Reply):
    agent_id: str
    matches: list[JsonObject]
    more: int
    """Matching lines past the request's ``limit``."""
    incomplete: str | None


class MemoryChanges(Reply):
    agent_id: str
    from_: str = Field(alias="from")
    to: str
    commits: list[JsonObject]
    diff: str
    truncated: bool


class MemoryReverted(Reply):
    agent_id: str
    reverted: JsonObject
    commit: JsonObject | None


class MemoryRemembered(Reply):
    agent_id: str
    path: str
    line: str
    commit: str | None


class ForgetListing(Reply):
    agent_id: str
    head: str
    """The commit the lines were found at: a confirmed forget names it as its ``base``."""
    lines: list[JsonObject]


class Forgotten(Reply):
    agent_id: str
    commit: str | None
    lines: list[JsonObject]


class ForgetAnswer(RootModel[ForgetListing | Forgotten]):
    """The lines a forget would take out, or (confirmed) those it took out."""


class HeldProposals(Reply):
    agent_id: str
    agent: str
    proposals: list[JsonObject]


class ProposalAnswered(Reply):
    agent_id: str
    proposal: JsonObject


class AgentDeleted(Reply):
    agent_id: str
    trash: str
    redis: Literal["dropped", "unreachable"]
    name: str


class ConversationDeleted(Reply):
    agent_id: str
    trash: str
    redis: Literal["dropped", "unreachable"]
    conversation_id: str


class Exported(Reply):
    agent_id: str
    name: str
    bytes: int
    sha256: str


class Uploaded(Reply):
    upload: str
    bytes: int


class ApiKeyShown(Reply):
    id: str
    name: str
    shown: str
    created_at: datetime
    revoked_at: datetime | None


class ApiKeyCreated(ApiKeyShown):
    key: str
    """The key itself: in this reply once, and nowhere else."""
    endpoint: str | None


class ApiKeyList(Reply):
    keys: list[ApiKeyShown]


class Stopping(Reply):
    stopping: Literal[True] = True
