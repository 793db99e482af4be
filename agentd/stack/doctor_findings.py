"""One line of ``agentd doctor``'s report: what was checked, what was found, what to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "✓" if self.ok else "✗"
        text = f"{mark} {self.what}: {self.detail}"
        return text if self.ok or not self.fix else f"{text}\n    → {self.fix}"
