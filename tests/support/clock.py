"""A clock tests set and move by hand, starting wherever CI wants to test.

CI runs the suite with ``TEST_CLOCK_START`` pinned near midnight and across a year
boundary, in far-apart time zones; unset, the clock starts at the real now, so the suite
also runs on whatever date it happens to be. Expectations that depend on the date are
derived from the clock, never written as literals.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

START_VARIABLE = "TEST_CLOCK_START"


def start_time() -> datetime:
    """``TEST_CLOCK_START`` (ISO 8601 with an offset) if set, else the real now."""
    pinned = os.environ.get(START_VARIABLE)
    if not pinned:
        return datetime.now(UTC)
    start = datetime.fromisoformat(pinned)
    if start.tzinfo is None:
        raise ValueError(f"{START_VARIABLE}={pinned!r} needs an offset (e.g. +14:00 or Z)")
    return start


class FakeClock:
    """Returns ``now`` until a test moves it; every caller of one clock agrees on the time."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or start_time()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now
