"""Agent and conversation records (``agent.json``, ``conversation.json``, ``context.json``,
``compaction-event.json``) and the defaults a new record starts from."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from shared.clock import utc_now
from shared.models.migrations import StateKind, current_version, migration
from shared.setting_choices import MergeMode, ReflectionTrigger


@migration("agent")
def v1_to_v2_tools_needing_approval(raw: dict[str, Any], _path: Path) -> dict[str, Any]:
    """v2 adds ``requires_approval`` (none, as before). The version is raised, not just a
    field added, so an older agentd refuses the record instead of reading it, dropping
    the list on its next save, and running those tools without asking."""
    return {**raw, "requires_approval": []}


AGENT_SCHEMA_VERSION = current_version("agent")
CONVERSATION_SCHEMA_VERSION = current_version("conversation")
CONTEXT_SCHEMA_VERSION = current_version("context")
MIN_CONTEXT_WINDOW = 1_000
"""The smallest window an agent may be set to (``agents create|update --context-window``):
agentd's own system prompt and tool schemas take ~500 tokens, so below this not one
message fits and every turn would fail. A window above it that memory has outgrown is
refused turn by turn instead, naming the agent's setting (:func:`check_floor`)."""
MAX_CONTEXT_WINDOW = 10_000_000
"""The largest context window, in tokens, an agent or the daemon may be set to: above
any model's, and small enough that the token budget's arithmetic stays in floats."""

BASE_SYSTEM_PROMPT = """\
You are a stateful agent with a memory: the markdown files below (a git repo). Keep it \
current: put what will matter later (the user, their preferences, your work) in the right \
file with edit_file or write_file. Old messages leave your context but stay findable with \
recall_search. Call tools to keep working; answer without one to hand back."""
"""The system prompt a new agent gets unless it names one (and a rebuilt record gets).
Short on purpose: it and the tool schemas are paid on every request, and small local
models have small windows."""


def trimmed(value: str | None) -> str | None:
    """Free text as stored: surrounding whitespace is never meaningful."""
    return value.strip() if isinstance(value, str) else value


class ReflectionOverrides(BaseModel):
    """The reflection settings an agent overrides; a field left ``None`` inherits the
    daemon's default (:mod:`shared.reflection.policy` resolves them). Unknown keys (a
    setting an older version stored) are ignored."""

    model_config = ConfigDict(frozen=True)

    trigger: ReflectionTrigger | None = None
    step_count: PositiveInt | None = None
    merge: MergeMode | None = None
    merge_instructions: str | None = None

    _trim = field_validator("merge_instructions")(trimmed)


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
    requires_approval: list[str] = Field(default_factory=list)
    """Tools whose every call waits for the user's yes (``agentctl agents update NAME
    --approve bash``); none by default."""
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


class CompactionEvent(BaseModel):
    """``compaction-event.json``: a compaction the reflection trigger has not consumed.

    Written by the store with the compacted window; read and cleared by the trigger
    (:mod:`shared.reflection.triggers`)."""

    schema_kind: ClassVar[StateKind] = "compaction-event"
    schema_version: int = current_version("compaction-event")
    pending: bool = True
    trigger: str
    summary_message_id: str
    at: datetime = Field(default_factory=utc_now)
