"""``approvals.json``: reading and replacing a conversation's waiting step, and finding
an approval id among every agent's conversations.

The file is replaced whole (write-temp-fsync-rename), like every state file: a crash
leaves the old step or the new one. Its writers take turns by construction: the answers
are written under the daemon's per-conversation answer lock, and the step is carried out
(:mod:`shared.agent.approval_step`) only once every call is answered, when no answer can
change it any more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog

from shared.errors import CorruptStateFile
from shared.message_refs import names_message
from shared.models.approvals import PendingCall, WaitingStep
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import ConversationFiles, Layout

log = structlog.get_logger(__name__)


def load_step(directory: Path) -> WaitingStep | None:
    """The conversation's latest waiting step (finished or not); None if it never had one."""
    return read_model(ConversationFiles(directory).approvals, WaitingStep)


def save_step(directory: Path, step: WaitingStep) -> None:
    write_model_atomic(ConversationFiles(directory).approvals, step)


def unfinished_step(directory: Path) -> WaitingStep | None:
    """The step the conversation's turn stopped on, while it is not carried out."""
    step = load_step(directory)
    return step if step is not None and step.finished_at is None else None


def every_step(layout: Layout, agent_id: str | None = None) -> Iterator[tuple[Path, WaitingStep]]:
    """Each conversation's latest step with its directory (of one agent, or of all). A
    damaged file is logged with its path and skipped: it hides nothing but itself."""
    pattern = f"{agent_id or '*'}/conversations/*/{ConversationFiles(Path()).approvals.name}"
    for path in sorted(layout.agents_dir.glob(pattern)):
        try:
            step = read_model(path, WaitingStep)
        except CorruptStateFile as exc:
            log.error("approvals_file_corrupt", path=exc.path, error=exc.message)
            continue
        if step is not None:
            yield path.parent, step


def waiting_calls(layout: Layout, agent_id: str | None = None) -> list[dict[str, Any]]:
    """Every call waiting for an answer, oldest step first (``agentctl approvals``)."""
    steps = sorted(every_step(layout, agent_id), key=lambda found: found[1].created_at)
    return [view(step, call) for _, step in steps for call in step.waiting]


def find_step(layout: Layout, ref: str) -> tuple[Path, WaitingStep, PendingCall] | None:
    """The step and call whose approval id is ``ref`` (whole, or its last 8 or more
    characters, as ids are shown); None when no conversation's latest step has it."""
    for directory, step in every_step(layout):
        for call in step.calls:
            if call.approval_id is not None and names_message(ref, call.approval_id):
                return directory, step, call
    return None


def view(step: WaitingStep, call: PendingCall) -> dict[str, Any]:
    """A waiting call as the socket, the client and the web view show it."""
    return {
        "id": call.approval_id,
        "agent_id": step.agent_id,
        "conversation_id": step.conversation_id,
        "turn_id": step.turn_id,
        "message_id": step.message_id,
        "tool_call_id": call.tool_call_id,
        "name": call.name,
        "arguments": call.arguments,
        "state": call.state,
        "since": step.created_at.isoformat().replace("+00:00", "Z"),
    }
