"""Messages: one line of ``messages.jsonl`` each, and the unit of the context window.

One model with a ``role`` (what the provider sees) and a ``kind`` (who made it):

- ``message``  ordinary user speech, assistant replies and tool results;
- ``summary``  a compaction summary (role user), never user speech;
- ``reminder`` a harness reminder such as ``<memory_update>`` (role user), never user speech;
- ``note``     a harness note to the model inside a turn (e.g. a tool rule was broken);
- ``stop``     how a turn ended when no assistant message could say so (error, cancelled);
  it is kept in the transcript but never sent to a model.

Two kinds carry a typed payload, stored under the line's ``metadata`` key: a summary its
:class:`SummaryPayload` (the raw summary, the compaction's statistics, the ids it keeps)
and a stop record its :class:`StopPayload` (the error code).

Recall and reflection treat only ``kind == "message"`` with role user as user speech.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.clock import utc_now

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
    """One message of a conversation, exactly as stored in ``messages.jsonl``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str
    """Sortable, unique (``msg-<ulid>``); order of ids is order of creation."""
    agent_id: str
    conversation_id: str
    role: Role
    kind: MessageKind = "message"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    """On tool results: the id of the call this answers."""
    name: str | None = None
    """On tool results: the tool's name."""
    is_error: bool = False
    """On tool results: the tool failed (its content says why)."""
    created_at: datetime = Field(default_factory=utc_now)
    turn_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    """Set on the message that ended a turn."""
    payload: SummaryPayload | StopPayload | None = Field(default=None, alias="metadata")
    """A summary's or a stop record's payload (the two have no field in common, so the
    stored object says which it is)."""

    @property
    def sent_to_model(self) -> bool:
        return self.kind != "stop"

    @property
    def summary_payload(self) -> SummaryPayload | None:
        """The payload of a summary; None on any other message."""
        if self.kind == "summary" and isinstance(self.payload, SummaryPayload):
            return self.payload
        return None

    @property
    def stop_payload(self) -> StopPayload | None:
        """The payload of a stop record; None on any other message."""
        if self.kind == "stop" and isinstance(self.payload, StopPayload):
            return self.payload
        return None

    def to_line(self) -> bytes:
        return (self.model_dump_json(exclude_defaults=True, by_alias=True) + "\n").encode()

    def to_api(self) -> dict[str, Any]:
        """The message as the socket API shows it: every field but unset optional ones,
        and ``metadata`` always (``{}`` without a payload)."""
        fields = self.model_dump(mode="json", exclude_none=True, by_alias=True)
        fields.setdefault("metadata", {})
        return fields
