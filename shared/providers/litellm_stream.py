"""A streamed litellm response put back together as one ``ModelResponse``.

litellm yields OpenAI-shaped chunks (``ModelResponseStream``): the text in pieces, each
tool call as an id and a name and then its arguments in pieces (keyed by ``index``), a
finish reason near the end, and, with ``stream_options={"include_usage": True}``, a last
chunk with no choices and the usage (litellm counts it itself for a provider that sends
none). The pieces of text are handed on as they come; everything is kept, and what comes
back at the end is what :func:`.litellm_wire.parse_response` would have made of the same
answer unstreamed: the log keeps the same complete message either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shared.errors import ProviderMisbehaved
from shared.models.messages import ToolCall
from shared.providers.base import ModelResponse
from shared.providers.litellm_wire import finish_reason, normalise_usage


@dataclass
class _CallParts:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembly:
    """The chunks of one streamed answer, added in order; :meth:`response` at the end."""

    def __init__(self, model: str, call_numbers: Iterator[int]) -> None:
        self.model = model
        self._call_numbers = call_numbers
        self._text: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._chunks = 0

    def add(self, chunk: Any) -> str:
        """Take one chunk; the piece of text it carries (``""`` if none)."""
        self._chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = usage
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return ""
        choice = choices[0]
        self._finish = getattr(choice, "finish_reason", None) or self._finish
        delta = getattr(choice, "delta", None)
        if delta is None:
            return ""
        for call in getattr(delta, "tool_calls", None) or []:
            self._add_call(call)
        text = getattr(delta, "content", None)
        if text is None:
            return ""
        if not isinstance(text, str):
            raise ProviderMisbehaved(
                f"{self.model}: streamed content is a {type(text).__name__}, not text"
            )
        if text:
            self._text.append(text)
        return text

    def _add_call(self, call: Any) -> None:
        index = getattr(call, "index", None)
        parts = self._calls.setdefault(index if isinstance(index, int) else 0, _CallParts())
        parts.id = getattr(call, "id", None) or parts.id
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if name:
            parts.name = name
        arguments = getattr(function, "arguments", None)
        if arguments:
            parts.arguments.append(arguments)

    def response(self) -> ModelResponse:
        """The whole answer, as :func:`.litellm_wire.parse_response` shapes one."""
        if not self._chunks:
            raise ProviderMisbehaved(f"{self.model}: the provider's stream ended with no chunks")
        calls = [self._call(parts) for _, parts in sorted(self._calls.items())]
        return ModelResponse(
            text="".join(self._text),
            tool_calls=calls,
            usage=normalise_usage(self._usage),
            finish_reason=finish_reason(self._finish, calls),
            model=self.model,
        )

    def _call(self, parts: _CallParts) -> ToolCall:
        if not parts.name:
            raise ProviderMisbehaved(
                f"{self.model}: the provider streamed a tool call with no name"
            )
        return ToolCall(
            id=parts.id or f"call-{next(self._call_numbers)}",
            name=parts.name,
            arguments="".join(parts.arguments) or "{}",
        )
