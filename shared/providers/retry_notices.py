"""Telling whoever waits on a turn that its model call is being retried.

A provider is shared by every conversation on its model, so it cannot hold a listener; the
turn that is waiting sets one for itself (:func:`retries_announced_to`) and the retry loop
inside the provider call reaches it through a context variable, which asyncio carries into
everything the turn awaits. Without a listener (a reflection job) retries are only logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pydantic import BaseModel


class RetryNotice(BaseModel):
    """One failed attempt that will be tried again after ``delay_s``."""

    model: str
    reason: str
    """What failed, as a person reads it: ``HTTP 429``, ``HTTP 503``, ``timed out``…"""
    delay_s: float
    attempt: int
    """The attempt that failed (1 = the first call)."""
    attempts: int
    """Attempts allowed for this kind of failure, the first one included."""


RetryListener = Callable[[RetryNotice], Awaitable[None]]

_listener: ContextVar[RetryListener | None] = ContextVar("retry_listener", default=None)


@contextmanager
def retries_announced_to(listener: RetryListener) -> Iterator[None]:
    """Within the block (and every task it awaits), retries are told to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


async def announce(notice: RetryNotice) -> None:
    listener = _listener.get()
    if listener is not None:
        await listener(notice)
