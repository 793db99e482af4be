"""Full garbage collections while nobody waits, so that none is long while somebody does.

A full collection stops every thread of the daemon, its event loop too, for as long as it
walks the objects it tracks. What a busy daemon makes is mostly its open conversations'
windows (every message, kept until compaction): after 7,000 turns of benchmark load a
full collection walked 35,000 objects and held the loop for 45-47 ms, and the collector
starts one whenever what it holds has grown by a quarter.

So the daemon starts full collections itself (:func:`shared.priority.favour_the_event_loop`
turns the collector's own off; the young generations are collected as before):

- **when quiet**: once no request has run for :data:`QUIET_S` after some were served, it
  collects what is not frozen and freezes what survives
  (:func:`shared.priority.collect_and_freeze`), so the next collection walks only what
  is made after. Nothing of a request is alive then to be frozen with it. At most once in
  :data:`FULL_WALK_EVERY_S` such a moment walks the frozen objects too, freeing cycles
  that died since they were frozen (a deleted agent's, say);
- **when overdue**: after :data:`OVERDUE_S` without a collection, busy or not, it collects
  what is not frozen and freezes nothing (a request running now would be frozen with
  it), so a daemon that is never quiet still frees its garbage cycles, pause and all.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

import structlog

from shared.priority import collect_and_freeze

log = structlog.get_logger(__name__)

QUIET_S = 1.0
"""How long no request may have run before the daemon collects."""
OVERDUE_S = 300.0
"""The longest the daemon goes without a collection."""
FULL_WALK_EVERY_S = 3600.0
"""How often a quiet collection walks the frozen objects too."""

Why = Literal["quiet", "quiet, frozen too", "overdue"]


class QuietCollection:
    """Counts requests as they start; :meth:`run` collects after each busy spell."""

    def __init__(
        self,
        in_flight: Callable[[], int],
        *,
        started_elsewhere: Callable[[], int] = lambda: 0,
        quiet_s: float = QUIET_S,
        overdue_s: float = OVERDUE_S,
        full_walk_every_s: float = FULL_WALK_EVERY_S,
    ) -> None:
        self.in_flight = in_flight
        self.started_elsewhere = started_elsewhere
        """Requests started through another door (the web view's server counts its own)."""
        self.quiet_s = quiet_s
        self.overdue_s = overdue_s
        self.full_walk_every_s = full_walk_every_s
        self.started = 0
        """Requests started so far."""
        self.collections: deque[Why] = deque(maxlen=100)
        """The latest collections, oldest first."""

    def request_started(self) -> None:
        self.started += 1

    def _started_in_all(self) -> int:
        return self.started + self.started_elsewhere()

    async def run(self) -> None:
        seen = self._started_in_all()
        last = last_full_walk = time.monotonic()
        served = was_busy = False
        while True:
            await asyncio.sleep(self.quiet_s)
            now = time.monotonic()
            started = self._started_in_all()
            busy = started != seen or self.in_flight() > 0
            seen = started
            served = served or busy
            quiet_throughout = not (busy or was_busy)
            was_busy = busy
            why: Why
            if served and quiet_throughout:
                full_walk = now - last_full_walk >= self.full_walk_every_s
                why = "quiet, frozen too" if full_walk else "quiet"
            elif now - last >= self.overdue_s:
                why = "overdue"
            else:
                continue
            began = time.perf_counter()
            if why == "overdue":
                gc.collect()
            else:
                collect_and_freeze(frozen_too=why == "quiet, frozen too")
            took_ms = round((time.perf_counter() - began) * 1000, 1)
            self.collections.append(why)
            served, last = False, time.monotonic()
            if why == "quiet, frozen too":
                last_full_walk = last
            log.debug("full_collection", why=why, ms=took_ms)
