"""How full a request is, where compaction starts, and what can never be compacted.

A request is system prompt (with compiled memory) + tool schemas + in-context messages,
and the window must also hold the reply. The first two are the *floor*: paid on every
request whatever the conversation's length. The *threshold* keeps room for the reply:
``window − min(16,384, max(1, ⌊0.2 × window⌋))`` (pi's 16k reserve, at most 20% of a
small window). Compaction runs *before* a request whose estimate passes the threshold,
because near a full window providers shorten the reply (a ``length`` stop) instead of
refusing, and no retry path would ever see an error to react to.

Message tokens are estimated at four characters a token, multiplied by the ratio learned
from the provider's own counts (:mod:`shared.context.calibration`; 1.0 until it reports
more), except that the provider's own count wins where it reported one: the newest
assistant message with usage anchors the estimate (its usage covers everything up to and
including it), and only messages after it are estimated. Usage recorded before the
latest compaction is void: the kept messages sit after the summary in the window but
describe the old, larger context, so the anchor must be *newer* (by time) than the
summary, not merely after it in the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from shared.errors import PromptFloorError
from shared.models.messages import AssistantMessage, Message
from shared.providers.base import AGENT_WINDOW_SETTING, ModelRequest, WindowSource
from shared.providers.tokens import message_tokens, text_tokens, tools_tokens

OUTPUT_RESERVE_TOKENS = 16_384
SMALL_WINDOW_RESERVE_RATIO = 0.2
OLLAMA_MIN_SUGGESTED_WINDOW = 8_192
OLLAMA_MAX_SUGGESTED_WINDOW = 1_048_576


def scaled(tokens: int, token_ratio: float) -> int:
    """An estimate in the provider's tokens: ``tokens`` (four characters each) × the ratio."""
    return tokens if token_ratio == 1.0 else math.ceil(tokens * token_ratio)


def compaction_threshold(window: int) -> int:
    """Tokens a request may hold before it must be compacted (never below 0)."""
    reserve = min(OUTPUT_RESERVE_TOKENS, max(1, math.floor(window * SMALL_WINDOW_RESERVE_RATIO)))
    return max(0, window - reserve)


@dataclass(frozen=True)
class MessagesEstimate:
    tokens: int
    anchor_index: int | None
    """Index of the assistant message whose reported usage anchors the estimate."""


def estimate_messages(messages: list[Message], token_ratio: float = 1.0) -> MessagesEstimate:
    """Tokens of the window's messages; includes system and tools when usage-anchored."""
    boundary = _latest_compaction(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, AssistantMessage) or message.usage is None:
            continue
        if boundary is not None and message.created_at <= boundary:
            break
        if message.usage.context_tokens > 0:
            trailing = scaled(sum(message_tokens(m) for m in messages[index + 1 :]), token_ratio)
            return MessagesEstimate(message.usage.context_tokens + trailing, index)
    return MessagesEstimate(scaled(sum(message_tokens(m) for m in messages), token_ratio), None)


def _latest_compaction(messages: list[Message]) -> datetime | None:
    summaries = [m.created_at for m in messages if m.kind == "summary"]
    return max(summaries) if summaries else None


@dataclass(frozen=True)
class Budget:
    """One request measured against one window."""

    window: int
    system_tokens: int
    tools_tokens: int
    message_count: int
    messages_tokens: int
    """Estimated message tokens, or (when anchored) the provider's count for everything
    up to the anchor plus estimates after it."""
    anchored: bool
    token_ratio: float = 1.0
    """What every estimate above was multiplied by (learned from the provider)."""
    window_source: WindowSource | None = None
    window_setting: str | None = None
    """Where ``window`` came from, for ``agentctl context`` (see ``Provider``)."""

    @property
    def threshold(self) -> int:
        return compaction_threshold(self.window)

    @property
    def floor(self) -> int:
        return self.system_tokens + self.tools_tokens

    @property
    def request_tokens(self) -> int:
        """The whole request: an anchored usage already includes the floor."""
        return self.messages_tokens if self.anchored else self.floor + self.messages_tokens

    @property
    def over_threshold(self) -> bool:
        return self.request_tokens > self.threshold

    def to_dict(self) -> dict[str, int | bool | float | str | None]:
        return {
            "window": self.window,
            "threshold": self.threshold,
            "system_tokens": self.system_tokens,
            "tools_tokens": self.tools_tokens,
            "floor": self.floor,
            "messages": self.message_count,
            "messages_tokens": self.messages_tokens,
            "request_tokens": self.request_tokens,
            "anchored": self.anchored,
            "token_ratio": self.token_ratio,
            "window_source": self.window_source,
            "window_setting": self.window_setting,
        }


def measure(request: ModelRequest, window: int, token_ratio: float = 1.0) -> Budget:
    estimate = estimate_messages(request.messages, token_ratio)
    return Budget(
        window=window,
        system_tokens=scaled(text_tokens(request.system), token_ratio),
        tools_tokens=scaled(tools_tokens(request.tools), token_ratio),
        message_count=len(request.messages),
        messages_tokens=estimate.tokens,
        anchored=estimate.anchor_index is not None,
        token_ratio=token_ratio,
    )


def check_floor(
    budget: Budget, model: str, *, setting: str | None = None, agent: str = "AGENT"
) -> None:
    """Refuse before calling the provider when the floor leaves no room at all. The fix
    names the setting the window came from: an agent's own window (``setting`` is
    :data:`AGENT_WINDOW_SETTING`) wins over ``AGENTD_CONTEXT_WINDOW``, so raising that
    one would change nothing."""
    if budget.floor < budget.threshold:
        return
    if setting == AGENT_WINDOW_SETTING:
        remedy = (
            "raise this agent's own window, which wins over AGENTD_CONTEXT_WINDOW, if the "
            f"model allows it: `agentctl agents update {agent} --context-window "
            f"{suggested_window(budget.floor)}`"
        )
    elif model.startswith(("ollama/", "ollama_chat/")):
        remedy = (
            f"serve the model with a larger window, e.g. `OLLAMA_CONTEXT_LENGTH="
            f"{suggested_window(budget.floor)} ollama serve`, and set AGENTD_CONTEXT_WINDOW "
            "to match"
        )
    else:
        remedy = (
            "use a model with a larger context window (or raise AGENTD_CONTEXT_WINDOW if the "
            "model allows more)"
        )
    raise PromptFloorError(
        f"the system prompt and tool schemas alone take ~{budget.floor:,} tokens, but model "
        f"{model!r} has a {budget.window:,}-token window with {budget.threshold:,} usable "
        "before the reply's reserve, so no message would fit. A local engine would silently "
        f"drop the start of the prompt (memory, persona) instead of refusing. To fix it, "
        f"{remedy}; or carry less: system/ memory files are always in the prompt."
    )


CRAMPED_ROOM_TOKENS = 128
"""Room for messages (threshold − floor) under which a summary and one short exchange
barely fit, so nearly every turn compacts, and each compaction queues a reflection."""
COMFORTABLE_ROOM_TOKENS = 2_048
"""The room a suggested window leaves: a summary and several exchanges."""


def cramped_room(budget: Budget) -> int | None:
    """The room the floor leaves for messages when it is positive but cramped, else None
    (no room at all is :func:`check_floor`'s refusal)."""
    room = budget.threshold - budget.floor
    return room if 0 < room < CRAMPED_ROOM_TOKENS else None


def comfortable_window(floor: int) -> int:
    """The smallest multiple of 1,024 whose threshold leaves comfortable room above ``floor``."""
    window = 1_024
    while compaction_threshold(window) - floor < COMFORTABLE_ROOM_TOKENS:
        window += 1_024
    return window


def suggested_window(floor: int) -> int:
    """The smallest power of two from 8,192 whose threshold leaves room above ``floor``."""
    window = OLLAMA_MIN_SUGGESTED_WINDOW
    while compaction_threshold(window) <= floor and window < OLLAMA_MAX_SUGGESTED_WINDOW:
        window *= 2
    return window
