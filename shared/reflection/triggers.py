"""The post-turn check: after a turn that ended ``end_turn``, is a reflection due?

Order matters. The turn's steps are counted first (its messages are already logged),
then the trigger decides, seeing whether a compaction is pending, then a due request is
recorded, and only then is the compaction flag consumed. The flag is consumed after every
such turn whatever the trigger — it means "a compaction happened in the turn that just
ended", so a compaction seen while the trigger was ``off`` must never fire a reflection
later — but never before a request that covers it is durably recorded: a crash in
between repeats the request (harmless: it joins the pending one, or finds nothing new)
instead of losing it.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _pending_event(directory: Path) -> CompactionEvent | None:
    """The pending ``compaction-event.json``, if any. A missing file means no compaction;
    an unreadable one is reported and counts as none."""
    path = directory / COMPACTION_EVENT_FILE
    try:
        event = read_model(path, CompactionEvent)
    except CorruptStateFile as exc:
        log.warning("compaction_event_unreadable", path=str(path), error=exc.message)
        return None
    return event if event is not None and event.pending else None


def compaction_pending(directory: Path) -> bool:
    return _pending_event(directory) is not None


def consume_compaction_flag(directory: Path) -> bool:
    """Clear a pending ``compaction-event.json``; True if it was pending."""
    event = _pending_event(directory)
    if event is None:
        return False
    write_model_atomic(
        directory / COMPACTION_EVENT_FILE, event.model_copy(update={"pending": False})
    )
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
    directory: Path,
    settings: ReflectionSettings,
    assistant_steps: int,
    record: Callable[[DueTrigger], object],
) -> PostTurnDecision:
    """Count the turn, decide, ``record`` a due request, then consume the compaction flag.

    Call only after a turn that ended ``end_turn``, once its messages are logged:
    interrupted, failed, max-steps and approval-waiting turns neither count nor decide
    (their compaction flag waits for the next turn that ends ``end_turn``). ``record``
    must make the request durable: the flag is cleared only after it returns, so if it
    raises (or the process dies) the flag stays and the next turn asks again.
    """
    state = record_turn(directory, assistant_steps)
    pending = compaction_pending(directory)
    trigger = due_trigger(settings, state, pending)
    if trigger is not None:
        record(trigger)
    if pending:
        consume_compaction_flag(directory)
    return PostTurnDecision(trigger, state)
