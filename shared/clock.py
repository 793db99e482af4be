"""The one clock of agentd: every timestamp we write comes from a :data:`Clock`.

Processes use :func:`utc_now`; tests inject their own so that a run on any date, in any
time zone, sees the same "now" in the messages it writes, the reflection job that reads
them and the outcome it records (a message stamped by the real clock and a job judged by
a fixed one disagree about which day "today" was).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def user_zone(configured: str | None = None) -> tuple[tzinfo, str]:
    """The user's time zone and its name: ``configured`` (an IANA name), else ``$TZ``, else
    the system's. "Today" in a memory is the user's date, not UTC's."""
    name = configured or os.environ.get("TZ", "").removeprefix(":")
    if name:
        return ZoneInfo(name), name
    local = datetime.now().astimezone().tzinfo or UTC
    return local, local.tzname(None) or "UTC"
