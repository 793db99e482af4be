"""What crosses between the daemon and the reflection workers: requests and outcomes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from shared.clock import utc_now

TriggerSource = Literal["step-count", "compaction-event", "idle", "manual"]
"""What asked for a reflection: a post-turn trigger, the idle sweep, or the user."""
OutcomeStatus = Literal["merged", "no_changes", "held", "failed", "skipped"]
"""``held``: the reflection would delete or empty core memory, or remove a large share of
it, so its commits wait for the user (``agentctl memory proposals``) instead of merging."""
CONSUMING_STATUSES: frozenset[OutcomeStatus] = frozenset({"merged", "no_changes", "held"})
"""Outcomes whose transcript counts as reflected: the watermark moved past what they read.
A held proposal's messages were reflected; only its result waits for the user."""


class ReflectionRequest(BaseModel):
    """One request for a reflection, as recorded in the daemon's outbox and sent to Celery."""

    request_id: str
    agent_id: str
    conversation_ids: list[str] = Field(default_factory=list)
    """The conversations to reflect on; manual requests may name several (or use
    ``recent``); automatic ones name the conversation whose turn triggered them."""
    trigger: TriggerSource
    recent: int | None = None
    """Manual: reflect on the N most recently active conversations."""
    instruction: str | None = None
    requested_at: datetime = Field(default_factory=utc_now)


class ReflectionOutcome(BaseModel):
    """One finished job, as appended to ``reflections/log.jsonl`` and published."""

    reflection_id: str
    request_id: str
    agent_id: str
    conversation_ids: list[str] = Field(default_factory=list)
    trigger: TriggerSource
    status: OutcomeStatus
    reason: str | None = None
    """Why it failed or was skipped (``merge_conflict``, ``not_read``, ``no_payload``…)."""
    message: str = ""
    commits: list[str] = Field(default_factory=list)
    unread: list[str] = Field(default_factory=list)
    """Conversations this job left messages unreflected in (its budget was spent, or the
    sub-agent did not read them all): a consumed outcome with some asks for the next job."""
    started_at: datetime = Field(default_factory=utc_now)
    finished_at: datetime = Field(default_factory=utc_now)

    @property
    def duration_s(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    def summary_line(self) -> str:
        """What the client prints: ``☾ reflection <id>: merged — Merged 1 …``."""
        return f"☾ reflection {self.reflection_id}: {self.status} — {self.message}"
