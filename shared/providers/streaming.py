"""Text as the model writes it: who a streaming model call hands its pieces to.

A provider is shared by every conversation on its model, so it cannot hold a listener,
and the one-method seam (``complete(request) -> ModelResponse``) stays as it is: the
turn that wants the text as it comes sets a listener around its model call
(:func:`text_streamed_to`), and the provider inside reaches it through a context variable,
as :mod:`.retry_notices` reaches whoever waits for a retry. With a listener set, a
provider asks its model to stream and awaits the listener with each piece of text, in
order, before it returns the whole response; without one (a reflection job, a compaction
summary) it answers whole, as before.

The response a provider returns is the same either way: the pieces are what a client is
shown early, the response is what the log keeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

TextListener = Callable[[str], Awaitable[None]]
"""Awaited with each piece of text the model writes, in order (never with ``""``)."""

_listener: ContextVar[TextListener | None] = ContextVar("text_listener", default=None)


@contextmanager
def text_streamed_to(listener: TextListener) -> Iterator[None]:
    """Within the block, model calls stream their text to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def text_listener() -> TextListener | None:
    """The listener of the model call being made, if it streams."""
    return _listener.get()


def pieces(text: str, count: int) -> list[str]:
    """``text`` cut into at most ``count`` pieces of about equal length, at word ends where
    there are words (the offline models stream their answers in a few pieces like this)."""
    cut: list[str] = []
    start = 0
    for left in range(count, 0, -1):
        if start >= len(text):
            break
        end = len(text) if left == 1 else start + -(-(len(text) - start) // left)
        if end < len(text):
            space = text.rfind(" ", start + 1, end + 1)
            end = space + 1 if space > start else end
        cut.append(text[start:end])
        start = end
    return cut
