"""The OpenAI chat-completions format both ways: what a request may hold and which of it
becomes the agent's turn, and the completion, chunk, usage and error bodies sent back.

**The turn's input.** The agent keeps its own history, so the history a client sends is
not replayed: the turn's input is the text of the ``user`` messages after the request's
last ``assistant`` message (all of them when there is none), joined by a blank line.
``system`` and ``developer`` messages are ignored wherever they are (the agent's system
prompt is its memory); a ``tool`` message after the last ``assistant`` one is refused (the
agent runs its own tools), and so is a request whose last message is not the user's. Of a
message's content parts only text is taken; an image or any other part is refused.

Fields the agent has no use for (``temperature``, ``max_tokens``, ``tools``, …) are
accepted and ignored, so that clients which always send them work; ``n`` other than 1 is
refused, as one turn gives one reply.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadCompletionRequest
from shared.models.messages import Usage
from shared.models.turns import TurnResult

MAX_USER_CHARS = 256
"""The longest ``user`` (client id) taken."""


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    """The agent: its name or id."""
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, min_length=1, max_length=MAX_USER_CHARS)
    """The client's own id for whoever talks: each one gets a conversation of its own."""
    n: int | None = None

    def turn_input(self) -> str:
        """The text of the turn (see the module docstring)."""
        if self.n not in (None, 1):
            raise BadCompletionRequest("n must be 1: an agent's turn gives one reply", param="n")
        last_reply = max(
            (i for i, m in enumerate(self.messages) if m.role == "assistant"), default=-1
        )
        trailing = self.messages[last_reply + 1 :]
        if any(m.role in ("tool", "function") for m in trailing):
            raise BadCompletionRequest(
                "the agent runs its own tools: tool results are not taken; send the user's "
                "message after the last assistant message",
                param="messages",
            )
        said = [_text(m, last_reply + 1 + i) for i, m in enumerate(trailing) if m.role == "user"]
        if not said:
            raise BadCompletionRequest(
                "the last message must be the user's: the turn's input is the user messages "
                "after the last assistant message",
                param="messages",
            )
        text = "\n\n".join(said)
        if not text.strip():
            raise BadCompletionRequest("the user's message is empty", param="messages")
        return text

    @property
    def usage_chunk(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


def _text(message: ChatMessage, index: int) -> str:
    if isinstance(message.content, str):
        return message.content
    parts = message.content or []
    for part in parts:
        if part.type != "text" or part.text is None:
            raise BadCompletionRequest(
                f"messages[{index}]: only text content is taken, not {part.type!r}",
                param=f"messages[{index}].content",
            )
    return "\n".join(part.text or "" for part in parts)


FinishReason = Literal["stop", "length"]


def finish_reason(result: TurnResult) -> FinishReason:
    """``length`` when the model ran out of output tokens, else ``stop`` (a turn that
    waits for approval stops too: the reply says what waits)."""
    return "length" if result.stop_reason == "max_tokens" else "stop"


def usage(total: Usage) -> dict[str, Any]:
    """The turn's usage (every model call of it) as OpenAI counts it: the prompt includes
    what was read from or written to a cache."""
    prompt = total.input_tokens + total.cache_read_tokens + total.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": total.output_tokens,
        "total_tokens": prompt + total.output_tokens,
        "prompt_tokens_details": {"cached_tokens": total.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": total.reasoning_tokens},
    }


def extra(result: TurnResult) -> dict[str, Any]:
    """What agentd adds to a completion (clients ignore fields they do not know)."""
    return {
        "agent_id": result.agent_id,
        "conversation_id": result.conversation_id,
        "turn_id": result.turn_id,
        "stop_reason": result.stop_reason,
        "approvals": result.approvals,
    }


class Completion:
    """The bodies of one completion: ids and times fixed at its start."""

    def __init__(self, model: str, completion_id: str) -> None:
        self.id = completion_id
        self.model = model
        self.created = int(time.time())

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, result: TurnResult) -> dict[str, Any]:
        return {
            **self._head("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason(result),
                    "logprobs": None,
                }
            ],
            "usage": usage(result.usage),
            "agentd": extra(result),
        }

    def chunk(
        self, delta: dict[str, Any], finish: FinishReason | None = None, **more: Any
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {**self._head("chat.completion.chunk"), "choices": [choice], **more}

    def usage_chunk(self, result: TurnResult) -> dict[str, Any]:
        return {**self._head("chat.completion.chunk"), "choices": [], "usage": usage(result.usage)}


ErrorType = Literal["invalid_request_error", "authentication_error", "server_error"]


def error_body(
    message: str, *, kind: ErrorType, code: str | None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape: what its SDKs read into ``APIError.message``/``code``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
