"""The choices a few settings allow, spelled once for the settings, the daemon's requests
and ``agentctl``. Standard library only: the client imports it.
"""

from __future__ import annotations

from typing import Literal

ReflectionTrigger = Literal["off", "step-count", "compaction-event"]
"""When an agent reflects: the one spelling the settings, the daemon's requests and
``agentctl reflection-settings`` share."""
MergeMode = Literal["auto", "explicit"]
"""How a reflection lands: ``auto`` merges; ``explicit`` waits for the agent's review."""
DEFAULT_MODEL = "default"
"""The model an agent update names to drop the agent's own model for the global one."""
