"""Compaction: the oldest part of the window becomes one summary; nothing is deleted.

The window is cut in two. The recent tail is kept verbatim, sized to half of what the
threshold leaves after the floor (a quarter after an overflow, when the estimate was
proven wrong), so several turns fit before the next compaction. The head is summarised by
the agent's model (or a configured summariser) into one ``summary`` message that opens the
new window with an alert saying how many messages it replaces. A tool call and its results
always land on the same side of the cut.

``messages.jsonl`` only grows: the summary is appended like any message (carrying its
statistics, the raw summary and the ids it keeps) and the head stays in the log for
recall. This module writes no file: :meth:`Conversation.compact` stores its result —
the summary appended, ``context.json`` replaced atomically, and a pending
``compaction-event.json`` that tells the reflection trigger a compaction happened.
"""

from __future__ import annotations

import structlog

from shared.context.budget import Budget, scaled
from shared.context.summary import summarise
from shared.models.agents import CompactionEvent
from shared.models.messages import CompactionStats, Message, SummaryPayload
from shared.providers.base import Provider
from shared.providers.tokens import message_tokens, text_tokens
from shared.store.conversations import Conversation

log = structlog.get_logger(__name__)

KEEP_FRACTION = {"context_pressure": 0.5, "context_overflow": 0.25}
"""Share of the message budget (threshold − floor) the kept tail may use, per trigger."""
OVERFLOW_KEEP_OF_CURRENT = 0.5
"""After a refusal the estimate is proven low: keep at most half of what was sent."""


def _keep_tokens(window: list[Message], budget: Budget, trigger: str) -> int:
    keep = int(max(0, budget.threshold - budget.floor) * KEEP_FRACTION[trigger])
    if trigger == "context_overflow":
        current = _tokens(window, budget.token_ratio)
        keep = min(keep, int(current * OVERFLOW_KEEP_OF_CURRENT))
    return keep


def _tokens(messages: list[Message], token_ratio: float) -> int:
    return scaled(sum(message_tokens(m) for m in messages), token_ratio)


def plan_cut(messages: list[Message], keep_tokens: int, token_ratio: float = 1.0) -> int:
    """Index of the first kept message: ``messages[:cut]`` are summarised (0: nothing).
    ``keep_tokens`` is in the provider's tokens: estimates are scaled by ``token_ratio``."""
    n = len(messages)
    cut, kept = n, 0
    while cut > 0 and kept + scaled(message_tokens(messages[cut - 1]), token_ratio) <= keep_tokens:
        cut -= 1
        kept += scaled(message_tokens(messages[cut]), token_ratio)
    cut = min(cut, n - 1)
    return _not_between_call_and_result(messages, max(cut, 0))


def _not_between_call_and_result(messages: list[Message], cut: int) -> int:
    """Move a cut that would open the window with a tool result: back to the call that
    made it (keeping the pair), or, if that leaves nothing to summarise, past the results."""
    if cut >= len(messages) or messages[cut].role != "tool":
        return cut
    back = cut
    while back > 0 and messages[back].role == "tool":
        back -= 1
    if back > 0:
        return back
    forward = cut
    while forward < len(messages) and messages[forward].role == "tool":
        forward += 1
    return forward


def summary_content(summary: str, summarised: int) -> str:
    return (
        f"[system alert] {summarised} earlier messages were hidden to save room (recall_search "
        f"still finds them). Summary:\n{summary}"
    )


async def compact(
    conversation: Conversation,
    summariser: Provider,
    budget: Budget,
    *,
    trigger: str,
    turn_id: str | None = None,
) -> CompactionStats | None:
    """Summarise the head of the window; None when there is nothing to summarise."""
    window = conversation.context
    cut = plan_cut(window, _keep_tokens(window, budget, trigger), budget.token_ratio)
    if cut == 0:
        log.warning(
            "compaction_skipped",
            trigger=trigger,
            reason="nothing to summarise",
            messages=len(window),
        )
        return None
    head, kept = window[:cut], window[cut:]
    summary = await summarise(summariser, head)
    content = summary_content(summary, len(head))
    ratio = budget.token_ratio
    tokens_before = budget.floor + _tokens(window, ratio)
    stats = CompactionStats(
        at=conversation.clock(),
        trigger=trigger,
        messages_before=len(window),
        messages_after=1 + len(kept),
        summarised=len(head),
        tokens_before=tokens_before,
        tokens_after=budget.floor + scaled(text_tokens(content), ratio) + _tokens(kept, ratio),
        window=budget.window,
        threshold=budget.threshold,
        floor=budget.floor,
    )
    message = conversation.new_message(
        role="user",
        kind="summary",
        content=content,
        turn_id=turn_id,
        payload=SummaryPayload(summary=summary, compaction=stats, kept_ids=[m.id for m in kept]),
    )
    event = CompactionEvent(trigger=trigger, summary_message_id=message.id, at=stats.at)
    conversation.compact(message, kept, event)
    log.info("compacted", **stats.model_dump(exclude={"at"}))
    return stats
