"""Token estimates without a tokenizer: four characters (UTF-16 code units) per token.

The same rule letta-code's local backend uses; providers' real counts replace it where
they report usage. UTF-16 units, so an emoji counts 2 as in the source we follow. It sits
with the model seam because both sides use it: the context budget measures requests with
it, and the mock models report their usage and refuse an oversized request by it.
"""

from __future__ import annotations

import json
import math

from shared.models.messages import AssistantMessage, Message
from shared.providers.base import ModelRequest, ToolSchema

CHARS_PER_TOKEN = 4


def text_chars(text: str) -> int:
    """Length in UTF-16 code units (what the 4-chars-per-token rule counts). ASCII text,
    most of a request, is its length: no copy of it is made (every request is measured)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def text_tokens(text: str) -> int:
    return math.ceil(text_chars(text) / CHARS_PER_TOKEN)


def message_tokens(message: Message) -> int:
    chars = text_chars(message.content)
    for call in message.tool_calls if isinstance(message, AssistantMessage) else []:
        chars += text_chars(call.name) + text_chars(call.arguments)
    return math.ceil(chars / CHARS_PER_TOKEN)


def tools_tokens(tools: list[ToolSchema]) -> int:
    schemas = [t.to_openai() for t in tools]
    if not schemas:
        return 0
    return text_tokens(json.dumps(schemas, separators=(",", ":"), ensure_ascii=False))


def request_tokens(request: ModelRequest) -> int:
    """System prompt + tool schemas + messages: what the provider is asked to read."""
    return (
        text_tokens(request.system)
        + tools_tokens(request.tools)
        + sum(message_tokens(m) for m in request.messages)
    )
