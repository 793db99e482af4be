"""A step's model call with its text shown as it is written.

In a turn that streams, each call is announced first (``model_call``: a client shows that
it waits, and for how long, until something arrives), then every piece of the reply's
text is sent on as an ``assistant_delta`` event the moment the provider hands it over
(:mod:`shared.providers.streaming`). The log still gets one complete message per reply,
appended when the call returns, as before; the pieces are only what a client is shown
early.

A call cut short (cancelled: Ctrl-C, a client gone; or failed mid-stream) leaves the
pieces that arrived: :meth:`ReplyStream.cut_short` gives them to the loop, which keeps
them in the log as the reply, marked with how the turn stopped, so the transcript holds
what the user was shown.
"""

from __future__ import annotations

from shared.models.events import AssistantDelta, Emit, ModelCall
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.streaming import text_streamed_to


class ReplyStream:
    def __init__(self, emit: Emit, *, streams: bool) -> None:
        self.emit = emit
        self.streams = streams
        self._pieces: list[str] = []
        """The text of the call in progress, as it arrived."""

    async def call(self, provider: Provider, request: ModelRequest, step: int) -> ModelResponse:
        """One model call of step ``step`` (0-based), its text sent on as it arrives."""
        self._pieces = []
        if not self.streams:
            return await provider.complete(request)
        await self.emit(ModelCall(model=provider.model, step=step + 1))
        with text_streamed_to(self._piece):
            response = await provider.complete(request)
        self._pieces = []
        return response

    async def _piece(self, text: str) -> None:
        self._pieces.append(text)
        await self.emit(AssistantDelta(text=text))

    def cut_short(self) -> str:
        """The text a call that did not return had sent on (``""`` if none); once."""
        text, self._pieces = "".join(self._pieces), []
        return text
