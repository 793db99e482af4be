"""Token estimates without a tokenizer: four characters (UTF-16 code units) per token.

The same rule letta-code's local backend uses; providers' real counts replace it where
they report usage. UTF-16 units, so an emoji counts 2 as in the source we follow. It sits
with the model seam because both sides use it: the context budget measures requests with
it, and the mock models report their usage and refuse an oversized request by it.
"""

from __future__ import annotations

import math

from shared.models.messages import Message
from shared.models.text import text_chars
from shared.providers.base import ModelRequest, ToolSchema

CHARS_PER_TOKEN = 4


def text_tokens(text: str) -> int:
    return math.ceil(text_chars(text) / CHARS_PER_TOKEN)


def message_tokens(message: Message) -> int:
    return math.ceil(message.model_chars / CHARS_PER_TOKEN)


def tools_tokens(tools: list[ToolSchema]) -> int:
    """The schemas as one compact JSON array, ``[a,b,…]``: its brackets and commas plus
    each schema's own length, which the schema caches."""
    if not tools:
        return 0
    chars = 2 + len(tools) - 1 + sum(tool.json_chars for tool in tools)
    return math.ceil(chars / CHARS_PER_TOKEN)


def request_tokens(request: ModelRequest) -> int:
    """System prompt + tool schemas + messages: what the provider is asked to read."""
    return (
        text_tokens(request.system)
        + tools_tokens(request.tools)
        + sum(message_tokens(m) for m in request.messages)
    )
