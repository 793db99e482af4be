"""agentctl's one way with time: what it shows people, and what it reads from them.

The daemon answers in UTC (ISO 8601 with ``Z``); ``--json`` prints that as it is. People
read their own clock, so every human listing shows the local time (``$TZ``, else the
system's zone) with its offset, ``Z`` when that is UTC. What is shown can be pasted back
into ``--since``/``--until``, which read a bare date or date-time in the same local zone.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

ZONE_HELP = (
    "a date (2026-03-01), a date-time (2026-03-01T14:30) or one with an offset "
    "(…T14:30+08:00, …T06:30Z); without an offset it is local time ($TZ, else the system's)"
)
"""The help text of every flag that takes a time, so each says which zone it reads."""


def shown(value: str | None) -> str:
    """``value`` (ISO 8601 with an offset) as local time to the second with its offset,
    e.g. ``2026-03-01T14:30:05+08:00``; ``-`` when there is none."""
    if not value:
        return "-"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:  # never sent by the daemon; read as UTC rather than fail
        moment = moment.replace(tzinfo=UTC)
    local = moment.astimezone().isoformat(timespec="seconds")
    return local.removesuffix("+00:00") + "Z" if local.endswith("+00:00") else local


_PRECISION = re.compile(r"[T ]\d\d(:\d\d(:\d\d(\.\d+)?)?)?", re.IGNORECASE)


def _moment(text: str, edge: Literal["start", "end"]) -> str:
    """A time the user typed, as ISO 8601 with an offset for the daemon: a bare date is
    the start (or end) of that local day, a bare date-time a local one. Both ends are
    inclusive to the precision given, so a time copied from a listing (to the second)
    includes its own message in ``--until``."""
    value = text.strip()
    try:
        if len(value) == len("2026-03-01"):
            day = date.fromisoformat(value)
            moment = datetime.combine(day, time.min if edge == "start" else time.max)
        else:
            moment = datetime.fromisoformat(value)
            if edge == "end":
                moment += _span(value) - timedelta(microseconds=1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date or time: use 2026-03-01, 2026-03-01T14:30 or "
            "2026-03-01T14:30+08:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone, daylight saving included
    return moment.isoformat()


def _span(value: str) -> timedelta:
    """How long the time in ``value`` lasts at the precision it is written to
    (``14:30`` is a minute long)."""
    written = _PRECISION.search(value)
    if written is None or written.group(3):  # to a fraction of a second: that instant
        return timedelta(microseconds=1)
    if written.group(2):
        return timedelta(seconds=1)
    return timedelta(minutes=1) if written.group(1) else timedelta(hours=1)


def since(text: str) -> str:
    """argparse type of ``--since``: inclusive, a bare date from its first instant."""
    return _moment(text, "start")


def until(text: str) -> str:
    """argparse type of ``--until``: inclusive, a bare date to its last instant."""
    return _moment(text, "end")
