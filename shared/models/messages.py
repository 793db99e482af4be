"""Messages: one line of ``messages.jsonl`` each, and the unit of the context window.

Every message has a ``role`` (what the provider sees) and a ``kind`` (who made it), and
each combination is its own model with only its own fields (:data:`AnyMessage`):

- ``message``  :class:`UserMessage`, :class:`AssistantMessage` (text, tool calls, usage,
  stop reason) and :class:`ToolResult`, told apart by role;
- ``summary``  :class:`SummaryMessage`, a compaction summary (role user), never user speech;
- ``reminder`` :class:`ReminderMessage`, a harness reminder such as ``<memory_update>``
  (role user), never user speech;
- ``note``     :class:`NoteMessage`, a harness note to the model inside a turn (e.g. a tool
  rule was broken);
- ``stop``     :class:`StopRecord`, how a turn ended when no assistant message could say so
  (error, cancelled); it is kept in the transcript but never sent to a model.

A summary and a stop record carry a typed payload, stored under the line's ``metadata``
key: :class:`SummaryPayload` (the raw summary, the compaction's statistics, the ids it
keeps) and :class:`StopPayload` (the error code). Lines and the socket API keep the shape
they had when this was one model with a ``metadata`` dict.

Recall and reflection treat only ``kind == "message"`` with role user as user speech.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

from shared.clock import utc_now
from shared.models.text import text_chars

Role = Literal["user", "assistant", "tool"]
MessageKind = Literal["message", "summary", "reminder", "note", "stop"]
StopReason = Literal[
    "end_turn",
    "max_steps",
    "max_tokens",
    "tool_rule",
    "requires_approval",
    "error",
    "cancelled",
]
"""Why a turn ended; a closed set shared by the loop, the transcript and the client."""


class Usage(BaseModel):
    """Token usage of one model call, normalised so the four parts never overlap."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    """Prompt tokens that were neither read from nor written to a cache."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """Part of ``output_tokens`` spent on reasoning; informational."""

    @property
    def context_tokens(self) -> int:
        """Size of the context this call saw plus what it wrote: the budget's anchor."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"
    """The arguments exactly as the model wrote them (a JSON object, if the model behaved)."""

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ``ValueError`` with a reason the model can act on."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg} at {exc.pos})") from exc
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object")
        return value


class CompactionStats(BaseModel):
    """What one compaction did, kept on its summary and shown by ``agentctl context``."""

    trigger: str
    messages_before: int
    messages_after: int
    summarised: int
    tokens_before: int
    """Floor + estimated messages before compaction."""
    tokens_after: int
    """Floor + summary + kept messages after it."""
    window: int
    threshold: int
    floor: int
    at: datetime = Field(default_factory=utc_now)


class SummaryPayload(BaseModel):
    """A summary's payload: enough to rebuild the window from the log alone."""

    model_config = ConfigDict(frozen=True)

    summary: str
    """The summariser's text, without the alert that opens the message's content."""
    compaction: CompactionStats
    kept_ids: list[str]
    """The messages the summary kept verbatim after it, in order."""


class StopPayload(BaseModel):
    """A stop record's payload: the error code the client was told."""

    model_config = ConfigDict(frozen=True)

    code: str


class Message(BaseModel):
    """One message of a conversation, exactly as stored in ``messages.jsonl``: the fields
    every kind has. Each kind is a subclass with only its own fields (:data:`AnyMessage`
    tells them apart); build one with :meth:`Message.of` or the subclass itself, never
    this base.

    Fields are declared per kind, in the order a line has them, because a line
    re-encodes to its very bytes: ``messages.jsonl`` is never rewritten.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    """Sortable, unique (``msg-<ulid>``); order of ids is order of creation."""
    agent_id: str
    conversation_id: str
    role: Role
    kind: MessageKind
    content: str = ""

    if TYPE_CHECKING:
        # Every kind has these two, but each declares them itself, at the place its lines
        # have them (a line re-encodes to its very bytes); declared here for the type
        # checker only, so code that reads them off any message is checked.
        created_at: datetime
        turn_id: str | None

    @staticmethod
    def of(**fields: Any) -> AnyMessage:
        """The message of the kind ``fields`` say (``kind``, and ``role`` for ``message``)."""
        return _MESSAGE.validate_python(fields)

    @staticmethod
    def parse_line(line: bytes | str) -> AnyMessage:
        """One line of ``messages.jsonl``; raises :class:`pydantic.ValidationError`."""
        return _MESSAGE.validate_json(line)

    @property
    def sent_to_model(self) -> bool:
        return self.kind != "stop"

    @cached_property
    def model_chars(self) -> int:
        """What a model reads of this message, in UTF-16 code units (the token estimate
        counts these). Kept once counted: a message never changes once made, and every
        step of every turn measures the whole window."""
        return text_chars(self.content)

    def to_line(self) -> bytes:
        return (self.model_dump_json(exclude_defaults=True, by_alias=True) + "\n").encode()

    def to_api(self) -> dict[str, Any]:
        """The message as the socket API shows it, one shape for every kind: each field
        any kind has, but unset optional ones (``metadata`` ``{}`` without a payload)."""
        fields = self.model_dump(mode="json", exclude_none=True, by_alias=True)
        return {
            name: fields[name] if name in fields else _API_DEFAULTS[name]
            for name in _API_FIELDS
            if name in fields or name in _API_DEFAULTS
        }


_API_FIELDS = [
    "id",
    "agent_id",
    "conversation_id",
    "role",
    "kind",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "is_error",
    "created_at",
    "turn_id",
    "model",
    "usage",
    "stop_reason",
    "metadata",
]
_API_DEFAULTS: dict[str, Any] = {"tool_calls": [], "is_error": False, "metadata": {}}


class UserMessage(Message):
    """What the user said."""

    role: Literal["user"]
    kind: Literal["message"] = "message"
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None


class AssistantMessage(Message):
    """A model's reply: text, tool calls, or both."""

    role: Literal["assistant"]
    kind: Literal["message"] = "message"
    tool_calls: list[ToolCall] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    """Set on the message that ended a turn."""

    @cached_property
    def model_chars(self) -> int:
        """The text and every call's name and arguments (see :attr:`Message.model_chars`)."""
        calls = sum(text_chars(call.name) + text_chars(call.arguments) for call in self.tool_calls)
        return text_chars(self.content) + calls


class ToolResult(Message):
    """A tool's answer to one call."""

    role: Literal["tool"]
    kind: Literal["message"] = "message"
    tool_call_id: str | None = None
    """The id of the call this answers."""
    name: str | None = None
    """The tool's name."""
    is_error: bool = False
    """The tool failed (its content says why)."""
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None


class SummaryMessage(Message):
    """A compaction summary opening the window; never user speech."""

    role: Literal["user"]
    kind: Literal["summary"]
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None
    payload: SummaryPayload = Field(alias="metadata")


class ReminderMessage(Message):
    """A harness reminder such as ``<memory_update>``; never user speech."""

    role: Literal["user"]
    kind: Literal["reminder"]
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None


class NoteMessage(Message):
    """A harness note to the model inside a turn (e.g. a tool rule was broken)."""

    role: Literal["user"]
    kind: Literal["note"]
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None


class StopRecord(Message):
    """How a turn ended when no assistant message could say so; never sent to a model."""

    role: Literal["assistant"]
    kind: Literal["stop"]
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None
    stop_reason: StopReason
    payload: StopPayload = Field(alias="metadata")


class _ByKindThenRole:
    """Tells the kinds apart inside pydantic-core, never calling back into Python: a
    line's ``kind`` names its variant, and a line without one (or with ``message``) is
    told by its ``role``. A callable discriminator would make every parsed line a Python
    dict first, which slows reading a long log markedly."""

    def __get_pydantic_core_schema__(
        self, _source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        by_role = {
            "user": handler.generate_schema(UserMessage),
            "assistant": handler.generate_schema(AssistantMessage),
            "tool": handler.generate_schema(ToolResult),
        }
        kind_then_role: list[list[str | int]] = [["kind"], ["role"]]
        return core_schema.tagged_union_schema(
            {
                **by_role,
                "message": core_schema.tagged_union_schema(by_role, discriminator="role"),
                "summary": handler.generate_schema(SummaryMessage),
                "reminder": handler.generate_schema(ReminderMessage),
                "note": handler.generate_schema(NoteMessage),
                "stop": handler.generate_schema(StopRecord),
            },
            discriminator=kind_then_role,
        )


AnyMessage = Annotated[
    UserMessage
    | AssistantMessage
    | ToolResult
    | SummaryMessage
    | ReminderMessage
    | NoteMessage
    | StopRecord,
    _ByKindThenRole(),
]
"""Any one message, told apart by kind (and by role for ``message``)."""

_MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(AnyMessage)
