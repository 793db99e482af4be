"""The OpenAI chat format both ways: our request as the messages litellm sends, and
litellm's response as our ``ModelResponse``.

Apart from the provider so what the model sees (which harness messages become user
content, how tool calls are spelled) and what we accept back (a response we cannot use
is ``ProviderMisbehaved``, never a half-filled answer) read in one place, free of the
call, its retries and its errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.errors import ProviderMisbehaved
from shared.models.messages import AssistantMessage, Message, ToolCall, ToolResult, Usage
from shared.providers.base import FinishReason, ModelRequest, ModelResponse

_USER_KINDS = frozenset({"summary", "reminder", "note"})
"""Harness-made messages that the model sees as user content, whatever their role."""


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request as OpenAI chat messages: the system prompt, then every sendable message."""
    converted = [{"role": "system", "content": request.system}]
    converted.extend(_to_openai_message(m) for m in request.messages if m.sent_to_model)
    return converted


def _to_openai_message(message: Message) -> dict[str, Any]:
    if message.role == "user" or message.kind in _USER_KINDS:
        return {"role": "user", "content": message.content}
    if isinstance(message, ToolResult):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    converted: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if isinstance(message, AssistantMessage) and message.tool_calls:
        converted["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    return converted


def parse_response(raw: Any, model: str, call_numbers: Iterator[int]) -> ModelResponse:
    """litellm's response as a ``ModelResponse``; a tool call without an id gets
    ``call-<n>`` with the next of ``call_numbers``."""
    choices = getattr(raw, "choices", None)
    if not choices:
        raise ProviderMisbehaved(f"{model}: the provider answered with no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise ProviderMisbehaved(f"{model}: the provider's choice has no message")
    content = message.content
    if content is not None and not isinstance(content, str):
        raise ProviderMisbehaved(
            f"{model}: message content is a {type(content).__name__}, not text"
        )
    tool_calls = [_parse_tool_call(call, model, call_numbers) for call in message.tool_calls or []]
    return ModelResponse(
        text=content or "",
        tool_calls=tool_calls,
        usage=normalise_usage(getattr(raw, "usage", None)),
        finish_reason=finish_reason(getattr(choice, "finish_reason", None), tool_calls),
        model=model,
    )


def _parse_tool_call(call: Any, model: str, call_numbers: Iterator[int]) -> ToolCall:
    function = getattr(call, "function", None)
    name = getattr(function, "name", None)
    if not name:
        raise ProviderMisbehaved(f"{model}: the provider sent a tool call with no name")
    return ToolCall(
        id=getattr(call, "id", None) or f"call-{next(call_numbers)}",
        name=name,
        arguments=getattr(function, "arguments", None) or "{}",
    )


def normalise_usage(raw: Any) -> Usage:
    """litellm usage → our four non-overlapping parts (``prompt_tokens`` includes the cache)."""
    if raw is None:
        return Usage()
    prompt = _count(getattr(raw, "prompt_tokens", 0))
    cache_read = _count(getattr(getattr(raw, "prompt_tokens_details", None), "cached_tokens", 0))
    cache_read = cache_read or _count(getattr(raw, "cache_read_input_tokens", 0))
    cache_write = _count(getattr(raw, "cache_creation_input_tokens", 0))
    reasoning = getattr(getattr(raw, "completion_tokens_details", None), "reasoning_tokens", 0)
    return Usage(
        input_tokens=max(0, prompt - cache_read - cache_write),
        output_tokens=_count(getattr(raw, "completion_tokens", 0)),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=_count(reasoning),
    )


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def finish_reason(reported: str | None, tool_calls: list[ToolCall]) -> FinishReason:
    if reported == "length":
        return "length"
    return "tool_calls" if tool_calls else "stop"
