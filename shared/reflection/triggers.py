"""The post-turn check: after a turn that ended ``end_turn``, is a reflection due?

Order matters. The turn's steps are counted first (its messages are already logged),
then the trigger decides, seeing whether a compaction is pending, then a due request is
recorded, and only then is the compaction flag consumed. The flag is consumed after every
such turn whatever the trigger — it means "a compaction happened in the turn that just
ended", so a compaction seen while the trigger was ``off`` must never fire a reflection
later — but never before a request that covers it is durably recorded: a crash in
between repeats the request (harmless: it joins the pending one, or finds nothing new)
instead of losing it.

The counting and the flag take file locks and touch small files, so from the daemon's
event loop they run in a thread; the flag consumed is the one the check saw, so a
compaction of the next turn, landing while this check was away, stays pending for that
turn's own check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal, NamedTuple

import structlog

from shared.errors import CorruptStateFile
from shared.models.agents import CompactionEvent
from shared.reflection.policy import ReflectionSettings
from shared.reflection.state import TranscriptState, record_turn
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import ConversationFiles

log = structlog.get_logger(__name__)

DueTrigger = Literal["step-count", "compaction-event"]


class PostTurnDecision(NamedTuple):
    trigger: DueTrigger | None
    """The trigger that makes a reflection due now, or None."""
    state: TranscriptState
    """The conversation's state after counting the turn."""
    compaction: CompactionEvent | None
    """The pending compaction event the decision saw (the flag to consume), if any."""


def _pending_event(directory: Path) -> CompactionEvent | None:
    """The pending ``compaction-event.json``, if any. A missing file means no compaction;
    an unreadable one is reported and counts as none."""
    path = ConversationFiles(directory).compaction_event
    try:
        event = read_model(path, CompactionEvent)
    except CorruptStateFile as exc:
        log.warning("compaction_event_unreadable", path=str(path), error=exc.message)
        return None
    return event if event is not None and event.pending else None


def consume_compaction_flag(directory: Path, seen: CompactionEvent | None = None) -> bool:
    """Clear a pending ``compaction-event.json`` (only if it is still ``seen``, when
    given); True if it was cleared."""
    event = _pending_event(directory)
    if event is None or (seen is not None and event != seen):
        return False
    write_model_atomic(
        ConversationFiles(directory).compaction_event, event.model_copy(update={"pending": False})
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


def count_and_decide(
    directory: Path, settings: ReflectionSettings, assistant_steps: int
) -> PostTurnDecision:
    """Count the turn's steps and decide; blocking (the state lock), so from async code
    in a thread."""
    state = record_turn(directory, assistant_steps)
    event = _pending_event(directory)
    return PostTurnDecision(due_trigger(settings, state, event is not None), state, event)


async def post_turn(
    directory: Path,
    settings: ReflectionSettings,
    assistant_steps: int,
    record: Callable[[DueTrigger], Awaitable[object]],
) -> PostTurnDecision:
    """Count the turn, decide, ``record`` a due request, then consume the compaction flag.

    Call only after a turn that ended ``end_turn``, once its messages are logged:
    interrupted, failed, max-steps and approval-waiting turns neither count nor decide
    (their compaction flag waits for the next turn that ends ``end_turn``). ``record``
    must make the request durable: the flag is cleared only after it returns, so if it
    raises (or the process dies) the flag stays and the next turn asks again.
    """
    decision = await asyncio.to_thread(count_and_decide, directory, settings, assistant_steps)
    if decision.trigger is not None:
        await record(decision.trigger)
    if decision.compaction is not None:
        await asyncio.to_thread(consume_compaction_flag, directory, decision.compaction)
    return decision
