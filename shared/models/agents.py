"""Agent and conversation records (``agent.json``, ``conversation.json``, ``context.json``)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, Field

from shared.clock import utc_now
from shared.models.migrations import StateKind, current_version
from shared.reflection.settings import ReflectionOverrides

AGENT_SCHEMA_VERSION = current_version("agent")
CONVERSATION_SCHEMA_VERSION = current_version("conversation")
CONTEXT_SCHEMA_VERSION = current_version("context")
MAX_CONTEXT_WINDOW = 10_000_000
"""The largest context window, in tokens, an agent or the daemon may be set to: above
any model's, and small enough that the token budget's arithmetic stays in floats."""


class AgentRecord(BaseModel):
    schema_kind: ClassVar[StateKind] = "agent"
    schema_version: int = AGENT_SCHEMA_VERSION
    id: str
    name: str
    model: str | None = None
    """litellm model string, or None to follow the daemon's ``AGENTD_MODEL``."""
    system_prompt: str
    """The base prompt; compiled memory is appended to it on every turn."""
    context_window: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_WINDOW)
    """Per-agent override of the model's context window, in tokens."""
    default_conversation_id: str | None = None
    reflection: ReflectionOverrides | None = None
    """Per-agent reflection settings over the daemon's defaults."""
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)


class ConversationRecord(BaseModel):
    schema_kind: ClassVar[StateKind] = "conversation"
    schema_version: int = CONVERSATION_SCHEMA_VERSION
    id: str
    agent_id: str
    created_at: datetime = Field(default_factory=utc_now)
    memory_head_seen: str | None = None
    """The memory commit this conversation's last turn was built from; when HEAD moves
    past it, the next turn carries a ``<memory_update>`` reminder."""


class ContextState(BaseModel):
    """Which messages of the log are in the context window, oldest first.

    Appends always enter the window, so messages in the log newer than the last listed
    id belong to it too (a crash between an append and this file's replace loses
    nothing). Only compaction removes ids.
    """

    schema_kind: ClassVar[StateKind] = "context"
    schema_version: int = CONTEXT_SCHEMA_VERSION
    message_ids: list[str] = Field(default_factory=list)
    updated_at: datetime = Field(default_factory=utc_now)
