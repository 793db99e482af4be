"""The result of one chat turn, as returned over the socket."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from shared.models.messages import StopReason, Usage


class TurnResult(BaseModel):
    turn_id: str
    agent_id: str
    conversation_id: str
    stop_reason: StopReason
    text: str = ""
    """The assistant's last words to the user in this turn."""
    steps: int = 0
    assistant_messages: int = 0
    """Assistant messages this turn appended: the reflection trigger counts them as steps."""
    usage: Usage = Field(default_factory=Usage)
    message_ids: list[str] = Field(default_factory=list)
    """Every message this turn appended, in order."""
    error: dict[str, str] | None = None
    """``{code, message}`` when the turn stopped with ``error``."""
    approvals: list[dict[str, Any]] = Field(default_factory=list)
    """With ``requires_approval``: each call that waits for the user's answer, as
    ``agentctl approvals`` lists it (:func:`shared.store.approvals.view`)."""
