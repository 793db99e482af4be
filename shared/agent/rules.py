"""Tool rules: which calls end a turn, which must happen before it may end, which wait
for a human. The loop consults them; the main agent has none by default."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolRules:
    terminal: frozenset[str] = frozenset()
    """Calling one of these ends the turn (stop reason ``tool_rule``) after it runs."""
    required_before_exit: frozenset[str] = frozenset()
    """The turn may not end (without a tool call) until each of these has been called."""
    requires_approval: frozenset[str] = frozenset()
    """These are not run: the turn stops with ``requires_approval``."""

    def uncalled_required(self, called: Iterable[str]) -> list[str]:
        return sorted(self.required_before_exit - set(called))
