"""The socket's requests, validated at the boundary: one pydantic model per op
(:data:`agentd.daemon.ops.OPS` says which op takes which).

Unknown fields are refused (``extra="forbid"``) so a typo is an error, not a silent
default. Ids are checked by :func:`shared.ids.validate_id` before anything uses them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from shared.errors import MalformedRequest
from shared.ids import validate_id
from shared.memory.compile import HUMAN_PATH
from shared.memory.notes import MAX_NOTE_CHARS
from shared.memory.provenance import Via
from shared.models.agents import MAX_CONTEXT_WINDOW, MIN_CONTEXT_WINDOW
from shared.protocol import MAX_ARCHIVE_BYTES, MAX_REQUEST_BYTES
from shared.setting_choices import MergeMode, ReflectionTrigger


def _id(what: str) -> AfterValidator:
    return AfterValidator(lambda value: validate_id(value, what))


AgentRef = Annotated[str, _id("agent")]
"""An agent id or name (names follow the same safe pattern as ids)."""
ConversationId = Annotated[str, _id("conversation id")]
MessageId = Annotated[str, _id("message id")]
AgentName = Annotated[str, _id("agent name")]


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


ArgvText = Annotated[str, AfterValidator(_no_nul)]
"""Text that ends up in a command line (a git commit message), where NUL cannot go."""


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=64)
    op: str = Field(min_length=1, max_length=64)
    params: dict[str, Any] = Field(default_factory=dict)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(Params):
    pass


class AgentTarget(Params):
    agent: AgentRef | None = None
    """None means the default agent, created on first use."""


class AgentCreate(Params):
    name: AgentName
    model: str | None = Field(default=None, min_length=1, max_length=200)
    system_prompt: str | None = Field(default=None, min_length=1, max_length=50_000)
    persona: str | None = Field(default=None, max_length=20_000)
    human: str | None = Field(default=None, max_length=20_000)
    context_window: int | None = Field(default=None, ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW)


ToolName = Annotated[str, Field(min_length=1, max_length=64)]


class AgentUpdate(AgentTarget):
    name: AgentName | None = None
    model: str | None = Field(default=None, min_length=1, max_length=200)
    """A litellm model string, or ``"default"`` (``protocol.DEFAULT_MODEL``) to follow the
    global ``AGENTD_MODEL`` again."""
    system_prompt: str | None = Field(default=None, min_length=1, max_length=50_000)
    context_window: int | None = Field(default=None, ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW)
    requires_approval: list[ToolName] | None = Field(default=None, max_length=32)
    """The tools whose calls wait for the user's yes, replacing the list (``[]``: none)."""


class Chat(AgentTarget):
    conversation: ConversationId | None = None
    """None means the agent's default conversation, created on first use."""
    text: str = Field(min_length=1)


class ConversationTarget(AgentTarget):
    conversation: ConversationId | None = None


class MessagesList(AgentTarget):
    conversation: ConversationId | None = None
    before: MessageId | None = None
    after: MessageId | None = None
    limit: int = Field(default=20, ge=1, le=10_000)
    order: Literal["asc", "desc"] = "desc"
    """The page's order, ``desc`` newest first; it starts at a cursor if one is given,
    else at the newest (``desc``) or the oldest (``asc``) message."""


def _moment(edge: Literal["start", "end"]) -> BeforeValidator:
    """ISO date or date-time; a bare date means the start (or end) of that day, in UTC
    like every time without a zone (agentctl sends the user's local times with their
    offset)."""

    def parse(value: object) -> object:
        if isinstance(value, str) and len(value.strip()) == 10:
            day = date.fromisoformat(value.strip())
            clock = time.min if edge == "start" else time.max
            return datetime.combine(day, clock, tzinfo=UTC)
        return value

    return BeforeValidator(parse)


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class RecallSearch(AgentTarget):
    query: str = Field(min_length=1, max_length=2_000)
    conversation: ConversationId | None = None
    role: Literal["user", "assistant", "tool"] | None = None
    since: Annotated[datetime | None, _moment("start"), AfterValidator(_utc)] = None
    until: Annotated[datetime | None, _moment("end"), AfterValidator(_utc)] = None
    limit: int = Field(default=10, ge=1, le=1_000)


class MessagesAround(AgentTarget):
    message_id: MessageId
    before: int = Field(default=5, ge=0, le=200)
    after: int = Field(default=5, ge=0, le=200)


class SleeptimeSettings(AgentTarget):
    trigger: ReflectionTrigger | None = None
    step_count: int | None = Field(default=None, ge=1, le=100_000)
    merge: MergeMode | None = None
    merge_instructions: str | None = Field(default=None, max_length=10_000)


class ReflectRequest(AgentTarget):
    conversations: list[ConversationId] | None = Field(default=None, max_length=100)
    recent: int | None = Field(default=None, ge=1, le=100)
    instruction: str | None = Field(default=None, max_length=10_000)
    wait_s: float = Field(default=0, ge=0, le=3_600)
    """Wait this long for the outcome (0: return as soon as it is queued)."""


class ReflectionsList(AgentTarget):
    limit: int = Field(default=20, ge=1, le=1_000)


class MemoryLog(AgentTarget):
    limit: int = Field(default=20, ge=1, le=1000)


HAND_EDIT_MESSAGE = "chore: commit memory edits made by hand"


class MemoryShow(AgentTarget):
    path: str | None = Field(default=None, min_length=1, max_length=1000)


class MemoryCommit(AgentTarget):
    message: ArgvText = Field(default=HAND_EDIT_MESSAGE, min_length=1, max_length=2000)


class MemoryRead(AgentTarget):
    path: str = Field(min_length=1, max_length=1000)


class MemoryWrite(AgentTarget):
    path: str = Field(min_length=1, max_length=1000)
    text: str = Field(max_length=500_000)
    base: str | None = Field(default=None, pattern=r"^[0-9a-f]{40,64}$")
    """The file's blob at HEAD the edit started from (None: a new file)."""
    message: ArgvText | None = Field(default=None, min_length=1, max_length=2000)


MemoryRev = Annotated[str, Field(min_length=1, max_length=200)]
"""A memory revision (sha, ``HEAD~1``); whether it names a commit is checked against the
repo (:func:`shared.memory.provenance.resolve_commit`)."""


class MemoryBlame(AgentTarget):
    path: str = Field(min_length=1, max_length=1000)
    rev: MemoryRev = "HEAD"


class MemoryWhy(AgentTarget):
    text: str = Field(min_length=1, max_length=1000)
    limit: int = Field(default=20, ge=1, le=200)
    """At most this many matching lines, each with its evidence."""


class MemoryDiff(ConversationTarget):
    rev: MemoryRev | None = None
    """None: where the conversation's previous turn ended (see ``agentd.memory.history``)."""


class MemoryRevert(AgentTarget):
    commit: MemoryRev


class MemoryRemember(AgentTarget):
    """A note for memory (``agentctl remember``, the web view, MCP's ``remember``)."""

    text: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    path: str = Field(default=HUMAN_PATH, min_length=1, max_length=1000)
    """The file it goes to: what the agent knows about the user, by default."""
    via: Via = "agentctl"
    client: str | None = Field(default=None, min_length=1, max_length=200)
    """With ``via: mcp``: the MCP host's name and version, as it introduced itself."""

    @model_validator(mode="after")
    def _client_for_mcp(self) -> MemoryRemember:
        if self.client is not None and self.via != "mcp":
            raise ValueError("client is given with via 'mcp' only (an MCP host's name)")
        return self


class MemoryForget(AgentTarget):
    """Memory lines containing ``pattern``: shown, or with ``confirm`` taken out."""

    pattern: str = Field(min_length=1, max_length=1000)
    path: str | None = Field(default=None, min_length=1, max_length=1000)
    """Only this file's lines; None: every memory file's."""
    confirm: bool = False
    """False: only list the lines. True: remove them in one commit, if they are still the
    lines memory held at ``base``."""
    base: str | None = Field(default=None, pattern=r"^[0-9a-f]{40,64}$")
    """The memory commit the lines were shown at (the listing's ``head``)."""
    via: Literal["agentctl", "web"] = "agentctl"

    @model_validator(mode="after")
    def _base_to_confirm(self) -> MemoryForget:
        if self.confirm and self.base is None:
            raise ValueError(
                "confirm needs base: the head the lines were listed at, so what is removed "
                "is what was shown"
            )
        return self


class MemoryAnswer(AgentTarget):
    proposal: Annotated[str, _id("proposal id")]
    """A held proposal's id (its reflection's id, as ``memory proposals`` lists it)."""


ApprovalId = Annotated[str, _id("approval id")]
"""An approval id, whole or its last 8 or more characters (as ``agentctl approvals``
shows it)."""


class ApprovalsList(Params):
    agent: AgentRef | None = None
    """Only this agent's waiting calls; None: every agent's."""


class ApprovalApprove(Params):
    approval: ApprovalId


class ApprovalDeny(Params):
    approval: ApprovalId
    reason: str | None = Field(default=None, min_length=1, max_length=2_000)
    """Given to the model with the denial."""


class AgentDelete(Params):
    agent: AgentRef


class ConversationDelete(AgentTarget):
    conversation: ConversationId


class ArchiveUpload(Params):
    upload: Annotated[str, _id("upload id")] | None = None
    """None starts a new upload."""
    offset: int = Field(ge=0, le=MAX_ARCHIVE_BYTES)
    data: str = Field(min_length=1, max_length=MAX_REQUEST_BYTES)
    """Base64 of the next piece of the archive."""


class AgentImport(Params):
    upload: Annotated[str, _id("upload id")]
    keep_id: bool = False
    name: AgentName | None = None


# --- the OpenAI-compatible endpoint's keys (agentctl api-key) ----------------------------


class ApiKeyCreate(Params):
    name: Annotated[str, _id("API key name")]
    """What the key is for (``open-webui``), to tell keys apart and revoke one by name."""


class ApiKeyRevoke(Params):
    key: Annotated[str, _id("API key")]
    """The key's name or id."""


def parse_params(model: type[Params], params: dict[str, Any]) -> Params:
    """Validate ``params``; a bad id raises ``InvalidId`` (pydantic lets it through, as it is
    not a ``ValueError``), anything else ``MalformedRequest``."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise MalformedRequest(describe(exc, prefix="params")) from exc


def describe(exc: ValidationError, *, prefix: str) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in (prefix, *first["loc"]))
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
