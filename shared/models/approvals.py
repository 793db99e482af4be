"""A step waiting for the user's yes: ``approvals.json`` beside the conversation's log.

When a step of a turn calls a tool the agent's settings say needs approval, none of the
step's calls runs (the step waits for all of them, so they still run in the order the
model gave them) and the turn stops with ``requires_approval``. What waits is recorded
here, after the assistant message holding the calls is in the log: each call with its
state, and for the calls that need a yes, an approval id the user answers by.

States of a call, each change fsync'd before anything depends on it::

    waiting ──approve──▶ approved ──▶ running ──▶ (its result is in the log)
        └─────deny────▶ denied  ─────────────────▶ (the denial is its result)

A call that needs no approval starts ``approved``. ``running`` is written before the
tool starts, so after a crash a call that may have taken effect is told apart from one
that never started: neither is run again (:mod:`shared.agent.approval_step`). Once every
call has its result the step is ``finished``; the file stays until the conversation's
next waiting step replaces it, so a late second answer to one of its calls is told
``already_answered`` rather than ``unknown_approval``.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from shared.clock import utc_now
from shared.models.messages import Usage
from shared.models.migrations import StateKind, current_version

CallState = Literal["waiting", "approved", "denied", "running"]
Decision = Literal["approved", "denied"]


class PendingCall(BaseModel):
    """One call of the waiting step, in the order the model made them."""

    tool_call_id: str
    name: str
    arguments: str
    approval_id: str | None = None
    """What the user answers by; None for a call that needs no approval."""
    state: CallState
    reason: str | None = None
    """Why the user denied it (given to the model with the denial)."""
    answered_at: datetime | None = None


class WaitingStep(BaseModel):
    """The conversation's latest step that waited for approval (``approvals.json``)."""

    schema_kind: ClassVar[StateKind] = "approvals"
    schema_version: int = current_version("approvals")
    agent_id: str
    conversation_id: str
    turn_id: str
    message_id: str
    """The assistant message whose calls these are."""
    created_at: datetime = Field(default_factory=utc_now)
    steps: int
    """Model calls the turn made before it stopped: the continuation's step limit counts
    on from here."""
    assistant_messages: int
    """Assistant messages the turn appended before it stopped: the continuation's result
    carries them, so the turn's steps are counted once, when it ends."""
    usage: Usage = Field(default_factory=Usage)
    calls: list[PendingCall]
    finished_at: datetime | None = None
    """Every call has its result in the log (or the step was settled after a crash)."""

    def call(self, approval_id: str) -> PendingCall | None:
        return next((c for c in self.calls if c.approval_id == approval_id), None)

    @property
    def waiting(self) -> list[PendingCall]:
        """The calls still waiting for an answer (none once finished)."""
        if self.finished_at is not None:
            return []
        return [c for c in self.calls if c.state == "waiting"]

    @property
    def answered(self) -> bool:
        """Every call has an answer: the step may be carried out."""
        return all(c.state != "waiting" for c in self.calls)
