"""How a test waits: on a condition, up to a generous ceiling that one setting scales.

A test never sleeps a fixed time hoping something has happened by then, and never fails
because a busy machine was slow: it polls for the condition it needs (:func:`wait_for`),
and gives up only after a ceiling. Every ceiling in the suite (a wait, a subprocess's
timeout, a thread's join) is written as what an idle machine needs with room to spare and
passed through :func:`ceiling`, which multiplies it by ``AGENTD_TEST_TIMEOUT_SCALE``.

The default scale is generous (4): on 2 cores shared with other work (load average 10–20)
a process that imports litellm takes a minute instead of 5 s, and a ceiling only costs
time when something is really hung. Raise it on a slower machine; lower it (say to 1) to
find a hang sooner. The suite's fixtures clear every other ``AGENTD_*`` variable before
each test but keep this one, so a helper process a test starts (``held_recall``) scales
its waits alike; the product's settings ignore it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SCALE_VARIABLE = "AGENTD_TEST_TIMEOUT_SCALE"
DEFAULT_SCALE = 4.0
POLL_S = 0.02


def _scale() -> float:
    text = os.environ.get(SCALE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_SCALE
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"{SCALE_VARIABLE}={text!r} is not a number (e.g. 4)") from None
    if not scale > 0:
        raise ValueError(f"{SCALE_VARIABLE}={text!r} must be above 0 (e.g. 4)")
    return scale


SCALE = _scale()
"""The multiplier of every ceiling, from ``AGENTD_TEST_TIMEOUT_SCALE`` (default 4)."""


def ceiling(seconds: float) -> float:
    """``seconds`` (enough on an idle machine, with room) as this run's ceiling."""
    return seconds * SCALE


def wait_for(
    condition: Callable[[], T],
    what: str,
    *,
    timeout_s: float = 30.0,
    poll_s: float = POLL_S,
    error: type[Exception] = AssertionError,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    After :func:`ceiling` of ``timeout_s`` it raises ``error`` naming ``what`` (a fault
    bench passes its own harness error, so a timeout there is reported, not failed)."""
    limit = ceiling(timeout_s)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {limit:.0f} s waiting for {what}")
        time.sleep(poll_s)


async def wait_until(
    condition: Callable[[], T], what: str, *, timeout_s: float = 30.0, poll_s: float = POLL_S
) -> T:
    """:func:`wait_for` inside an event loop: the loop runs on while it polls."""
    limit = ceiling(timeout_s)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")
        await asyncio.sleep(poll_s)
