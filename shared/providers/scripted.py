"""A provider that replays queued replies and records every request it was sent.

For tests of the loop, the daemon and (later) reflection: each queued item is a
``ModelResponse``, an exception to raise, or a function of the request.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from shared.ids import new_id
from shared.models.messages import ToolCall, Usage
from shared.providers.base import FinishReason, ModelRequest, ModelResponse, Provider

Reply = ModelResponse | BaseException | Callable[[ModelRequest], ModelResponse]


class ScriptedProvider(Provider):
    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        context_window: int = 128_000,
        model: str = "scripted",
        delay_s: float = 0.0,
    ) -> None:
        self.model = model
        self.context_window = context_window
        self.delay_s = delay_s
        self.replies: deque[Reply] = deque(replies or [])
        self.requests: list[ModelRequest] = []

    def enqueue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not self.replies:
            raise AssertionError("ScriptedProvider: no reply queued for this request")
        reply = self.replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(request)
        return reply


def text_reply(
    text: str, *, finish_reason: FinishReason = "stop", usage: Usage | None = None
) -> ModelResponse:
    """A plain answer; no usage unless given (a made-up count would anchor the budget)."""
    return ModelResponse(
        text=text,
        finish_reason=finish_reason,
        usage=usage or Usage(),
    )


def tool_reply(*calls: tuple[str, str], text: str = "") -> ModelResponse:
    """A reply calling tools, given as ``(name, arguments_json)`` pairs."""
    tool_calls = [ToolCall(id=new_id("call"), name=name, arguments=args) for name, args in calls]
    return ModelResponse(text=text, tool_calls=tool_calls, finish_reason="tool_calls")
