"""The post-turn check: after a turn that ended ``end_turn``, is a reflection due?

Order matters. The turn's steps are counted first (its messages are already logged),
then the compaction flag is consumed, then the trigger decides. The flag is consumed
after every such turn whatever the trigger: it means "a compaction happened in the turn
that just ended", so a compaction seen while the trigger was ``off`` must never fire a
reflection later, after the settings changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

import structlog

from shared.context.compaction import CompactionEvent
from shared.errors import CorruptStateFile
from shared.reflection.settings import ReflectionSettings
from shared.reflection.state import TranscriptState, record_turn
from shared.store.atomic import read_model, write_model_atomic

log = structlog.get_logger(__name__)

COMPACTION_EVENT_FILE = "compaction-event.json"

DueTrigger = Literal["step-count", "compaction-event"]


class PostTurnDecision(NamedTuple):
    trigger: DueTrigger | None
    """The trigger that makes a reflection due now, or None."""
    state: TranscriptState
    """The conversation's state after counting the turn."""


def consume_compaction_flag(directory: Path) -> bool:
    """Clear a pending ``compaction-event.json``; True if it was pending.

    A missing file means no compaction; an unreadable one is reported and counts as none.
    """
    path = directory / COMPACTION_EVENT_FILE
    try:
        event = read_model(path, CompactionEvent)
    except CorruptStateFile as exc:
        log.warning("compaction_event_unreadable", path=str(path), error=exc.message)
        return False
    if event is None or not event.pending:
        return False
    write_model_atomic(path, event.model_copy(update={"pending": False}))
    return True


def due_trigger(
    settings: ReflectionSettings, state: TranscriptState, compaction_pending: bool
) -> DueTrigger | None:
    """Which trigger fires for this turn, if any."""
    if settings.trigger == "compaction-event":
        return "compaction-event" if compaction_pending else None
    if (
        settings.trigger == "step-count"
        and state.steps_since_last_reflection >= settings.step_count
    ):
        return "step-count"
    return None


def post_turn(
    directory: Path, settings: ReflectionSettings, assistant_steps: int
) -> PostTurnDecision:
    """Count the turn, consume the compaction flag, decide.

    Call only after a turn that ended ``end_turn``, once its messages are logged:
    interrupted, failed, max-steps and approval-waiting turns neither count nor decide
    (their compaction flag waits for the next turn that ends ``end_turn``).
    """
    state = record_turn(directory, assistant_steps)
    pending = consume_compaction_flag(directory)
    return PostTurnDecision(due_trigger(settings, state, pending), state)
