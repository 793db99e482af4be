"""What ``agentd up`` prints: its children's lines and its own, told apart by process.

What it prints depends on who reads it. On a terminal (or ``AGENTD_LOG_FORMAT=console``)
each line is a readable one, prefixed by the process it came from (``agentd |``,
``reflector-1 |``, ``valkey |``, and ``up |`` for its own): the children are told to log
for a console. Anywhere else (or ``AGENTD_LOG_FORMAT=json``) every line is one JSON object
with a ``process`` field, for a log collector: the children's JSON lines get the field, a
line that is not JSON (a traceback) is wrapped, and the supervisor's own messages are
events like theirs.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from shared.settings import Settings

COLORS = ("36", "33", "35", "32", "34", "31")
"""The daemon's and the workers' prefixes on a terminal, in turn."""
VALKEY_COLOR = "37"
"""Valkey's prefix, and the supervisor's own."""


def console_output(settings: Settings) -> bool:
    """Readable lines rather than JSON: ``AGENTD_LOG_FORMAT``, else whether stdout is a
    terminal."""
    if settings.log_format == "auto":
        return sys.stdout.isatty()
    return settings.log_format == "console"


class StackOutput:
    """One stdout shared by every process of the stack, a line at a time."""

    def __init__(self, console: bool, names: Iterable[str]) -> None:
        self.console = console
        """Readable lines (children are told to log for a console too), else JSON."""
        self._tty = sys.stdout.isatty()
        self._width = max(len(name) for name in names)
        self._lock = threading.Lock()

    def stream(self, name: str, color: str) -> io.TextIOBase:
        """A text stream whose lines are relayed as process ``name``'s (where the
        supervisor's own structlog lines go)."""
        return _Lines(lambda line: self.relay(name, line, color), tty=self.console and self._tty)

    def relay(self, name: str, line: str, color: str) -> None:
        """A line a process wrote, told apart from the others' (module docstring)."""
        if self.console:
            self._print(self._prefixed(name, line, color))
            return
        if not line.strip():
            return
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = {"event": "output", "text": line, "timestamp": _now()}
        self._print(json.dumps({"process": name, **record}, ensure_ascii=False))

    def say(
        self, name: str, color: str, event: str, text: str, level: str = "info", **fields: Any
    ) -> None:
        """The supervisor's own news about process ``name``: ``text`` on a console, an
        ``event`` with ``fields`` in JSON."""
        if self.console:
            self._print(self._prefixed(name, text, color))
            return
        record = {
            "process": name,
            "event": event,
            "message": text,
            **fields,
            "service": "agentd-up",
            "level": level,
            "timestamp": _now(),
        }
        self._print(json.dumps(record, ensure_ascii=False))

    def _prefixed(self, name: str, line: str, color: str) -> str:
        prefix = f"{name:<{self._width}} |"
        if self._tty:
            prefix = f"\033[{color}m{prefix}\033[0m"
        return f"{prefix} {line}"

    def _print(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)


def _now() -> str:
    """A timestamp like structlog's (ISO 8601, UTC, ``Z``)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class _Lines(io.TextIOBase):
    """A text stream that hands each complete line to ``emit``."""

    def __init__(self, emit: Callable[[str], None], *, tty: bool) -> None:
        self._emit = emit
        self._tty = tty
        self._pending = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        """Whether the lines end on a terminal (the console renderer colours them then)."""
        return self._tty

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._emit(line)
        return len(text)
