"""The model seam: a request, a response and the one-method ``Provider`` interface."""

from __future__ import annotations

import abc
import json
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.models.messages import Message, ToolCall, Usage
from shared.models.text import text_chars

FinishReason = Literal["stop", "tool_calls", "length"]
WindowSource = Literal["model map", "setting", "default"]
"""Where a provider's context window came from: the model's own known size (litellm's
model map, or the mock's), a setting (``AGENTD_CONTEXT_WINDOW`` or the agent's
``context_window``), or a default guess for a model nobody described."""
RequestPurpose = Literal["conversation", "summary", "integration"]
"""What a request is for: a step of an agent's turn, a compaction summary, or a turn in
which the agent reviews and merges a reflection's proposal (explicit merge)."""


class ToolSchema(BaseModel):
    """A tool as the model sees it (OpenAI function-calling shape)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    @cached_property
    def json_chars(self) -> int:
        """Length of :meth:`to_openai` as compact JSON, as the token estimate counts it:
        kept, because every request of every turn is measured and a schema never changes."""
        return text_chars(json.dumps(self.to_openai(), separators=(",", ":"), ensure_ascii=False))


class ModelRequest(BaseModel):
    """Everything one model call sees, in the order the provider receives it."""

    system: str
    messages: list[Message]
    """In-context messages, oldest first; ``kind == "stop"`` records are never included."""
    tools: list[ToolSchema] = Field(default_factory=list)
    max_output_tokens: int | None = None
    purpose: RequestPurpose = "conversation"
    """Set by the harness so that a scripted model can tell its tasks apart without
    knowing the harness's prompts; real providers never send it."""


GLOBAL_WINDOW_SETTING = "AGENTD_CONTEXT_WINDOW"
AGENT_WINDOW_SETTING = "agent context_window"
"""The names ``agentctl context`` gives the two settings a window can come from: here,
below the factory that sets them, so that a refusal over the window can name the one to
raise."""


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: FinishReason = "stop"
    model: str = ""


class Provider(abc.ABC):
    """One model behind one async method. Implementations raise only ``ProviderError``s."""

    model: str
    context_window: int
    """Tokens the model accepts per request (prompt and output together)."""
    context_window_source: WindowSource = "model map"
    context_window_setting: str | None = None
    """The setting the window came from, when it came from one (``AGENTD_CONTEXT_WINDOW``,
    ``agent context_window``)."""

    @property
    def token_ratio(self) -> float:
        """Provider tokens per estimated (four-characters) token: what the context budget
        multiplies its estimates by (:mod:`shared.context.calibration` learns it)."""
        return 1.0

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run one model call. Raise ``ContextOverflowError`` when the request is too big."""
