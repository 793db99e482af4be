"""The events a request streams before its reply, one pydantic model each.

An event line on the socket is ``{"id": ..., "event": NAME, "data": {...}}``: ``NAME`` is
the model's :attr:`Event.name` (the ``EVENT_*`` spellings of :mod:`shared.protocol`,
which ``agentctl`` reads without pydantic) and ``data`` is :meth:`Event.data`. Whoever
runs a turn or an export is handed an :data:`Emit` and gives it models, so a misspelt
field is an error where it is made, not a key the client never reads. The web view's
streams and the OpenAI-compatible endpoint take the same models.

Field order is the wire's key order: keep it when adding fields.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shared.models.messages import CompactionStats
from shared.models.reflection import OutcomeStatus, ReflectionOutcome, TriggerSource
from shared.protocol import (
    EVENT_ARCHIVE,
    EVENT_ASSISTANT,
    EVENT_ASSISTANT_DELTA,
    EVENT_COMPACTION,
    EVENT_MEMORY_UPDATE,
    EVENT_MODEL_CALL,
    EVENT_PROVIDER_RETRY,
    EVENT_REFLECTION,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    EVENT_WAITING,
    EVENT_WARNING,
)


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: ClassVar[str]
    """The event's name on the wire."""

    def data(self) -> dict[str, Any]:
        """The event line's ``data``: JSON types, wire names."""
        return self.model_dump(mode="json", by_alias=True)


Emit = Callable[[Event], Awaitable[None]]
"""How a turn (or an export) tells its caller what happens while it runs."""


async def discard(_event: Event) -> None:
    """The ``emit`` of a run whose events nobody reads."""


class ModelCall(Event):
    """A model call starts: until its first text, a tool call or the next event, the
    client waits on the model."""

    name: ClassVar[str] = EVENT_MODEL_CALL
    model: str
    step: int


class AssistantDelta(Event):
    """A piece of the reply being written, as the model streams it."""

    name: ClassVar[str] = EVENT_ASSISTANT_DELTA
    text: str


class Assistant(Event):
    """A reply of the model, whole, once it is in the log."""

    name: ClassVar[str] = EVENT_ASSISTANT
    text: str


class ToolCalled(Event):
    name: ClassVar[str] = EVENT_TOOL_CALL
    id: str
    name_: str = Field(alias="name")
    arguments: str
    """As the model wrote them (a JSON object, if it behaved)."""


class ToolAwaitingApproval(ToolCalled):
    """A tool call held for the user's yes (``agentctl approvals``)."""

    awaiting_approval: str


class ToolResult(Event):
    name: ClassVar[str] = EVENT_TOOL_RESULT
    tool_call_id: str
    name_: str = Field(alias="name")
    content: str
    is_error: bool


class MemoryUpdate(Event):
    """Memory moved since the conversation's last turn; the turn is told which files."""

    name: ClassVar[str] = EVENT_MEMORY_UPDATE
    from_: str = Field(alias="from")
    to: str
    files: list[str]


class Compacted(CompactionStats, Event):
    """What one compaction did: the stats its summary keeps, as an event."""

    name: ClassVar[str] = EVENT_COMPACTION


class ReflectionTold(Event):
    """A reflection's outcome as the user is told it (also the items of the
    ``reflection.list`` and ``reflection.request`` replies)."""

    name: ClassVar[str] = EVENT_REFLECTION
    reflection_id: str
    request_id: str
    agent_id: str
    conversation_ids: list[str]
    trigger: TriggerSource
    status: OutcomeStatus
    reason: str | None
    message: str
    commits: list[str]
    unread: list[str]
    started_at: datetime
    finished_at: datetime
    duration_s: float
    line: str
    """What the client prints."""

    @classmethod
    def of(cls, outcome: ReflectionOutcome) -> ReflectionTold:
        return cls(
            **outcome.model_dump(),
            duration_s=round(outcome.duration_s, 2),
            line=outcome.summary_line(),
        )


class Waiting(Event):
    name: ClassVar[str] = EVENT_WAITING
    reason: str


class ProviderRetry(Event):
    """A model call failed in a way worth another try, after ``delay_s``."""

    name: ClassVar[str] = EVENT_PROVIDER_RETRY
    model: str
    reason: str
    delay_s: float
    attempt: int
    attempts: int


class WarningEvent(Event):
    """Something the user should fix that does not stop the turn."""

    name: ClassVar[str] = EVENT_WARNING
    code: str
    message: str


class ArchivePiece(Event):
    """A piece of an export archive, base64, in order."""

    name: ClassVar[str] = EVENT_ARCHIVE
    data_: str = Field(alias="data")
