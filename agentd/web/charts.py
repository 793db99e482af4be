"""The two pictures of the web view, computed here and drawn as inline SVG by the
templates: reflection outcomes per day, and a conversation's context gauge.

Geometry only (no markup), so the numbers a chart shows can be checked without parsing
SVG, and the templates' autoescaping covers every label.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta, tzinfo
from typing import Any

from shared.models.reflection import ReflectionOutcome

STATUSES = ("merged", "no_changes", "held", "skipped", "failed")
"""Stacked bottom to top, in this order."""
CHART_DAYS = 14
_BAR_AREA_HEIGHT = 120
_BAR_WIDTH = 28
_BAR_GAP = 8
GAUGE_WIDTH = 600


@dataclass(frozen=True, slots=True)
class Segment:
    status: str
    count: int
    y: int
    height: int


@dataclass(frozen=True, slots=True)
class DayBar:
    day: date
    x: int
    total: int
    segments: list[Segment]


@dataclass(frozen=True, slots=True)
class OutcomeChart:
    bars: list[DayBar]
    width: int
    height: int
    most: int
    """The busiest day's count: the scale's top."""


def outcomes_per_day(outcomes: list[ReflectionOutcome], zone: tzinfo) -> OutcomeChart:
    """One stacked bar per day for the :data:`CHART_DAYS` days up to the newest outcome,
    days in the user's zone (quiet days get an empty slot, so gaps show)."""
    if not outcomes:
        return OutcomeChart([], 0, 0, 0)
    counts: dict[date, Counter[str]] = {}
    for outcome in outcomes:
        day = outcome.finished_at.astimezone(zone).date()
        counts.setdefault(day, Counter())[outcome.status] += 1
    last = max(counts)
    days = [last - timedelta(days=back) for back in range(CHART_DAYS - 1, -1, -1)]
    most = max(sum(c.values()) for c in counts.values())
    bars = []
    for slot, day in enumerate(days):
        counted = counts.get(day, Counter())
        top = _BAR_AREA_HEIGHT
        segments = []
        for status in STATUSES:
            if counted[status]:
                height = max(1, round(counted[status] / most * _BAR_AREA_HEIGHT))
                top -= height
                segments.append(Segment(status, counted[status], top, height))
        x = slot * (_BAR_WIDTH + _BAR_GAP)
        bars.append(DayBar(day, x, sum(counted.values()), segments))
    width = len(days) * (_BAR_WIDTH + _BAR_GAP)
    return OutcomeChart(bars, width, _BAR_AREA_HEIGHT, most)


@dataclass(frozen=True, slots=True)
class Gauge:
    """Widths in pixels of :data:`GAUGE_WIDTH`, for a window drawn full width."""

    floor: int
    request: int
    threshold: int
    over_threshold: bool


def context_gauge(budget: dict[str, Any]) -> Gauge:
    """``budget`` is a ``context.show`` answer (window, threshold, floor, request)."""
    window = max(1, budget["window"])

    def scaled(tokens: int) -> int:
        return min(GAUGE_WIDTH, round(tokens / window * GAUGE_WIDTH))

    return Gauge(
        floor=scaled(budget["floor"]),
        request=scaled(budget["request_tokens"]),
        threshold=scaled(budget["threshold"]),
        over_threshold=budget["request_tokens"] > budget["threshold"],
    )
