"""Reflection settings: when to reflect (trigger) and how the result lands (merge mode).

Defaults come from the daemon's configuration; an agent stores only what it overrides
(``None`` inherits: :class:`~shared.models.agents.ReflectionOverrides`, part of its
record), so changing a default reaches every agent that did not choose otherwise. Values
are validated at this boundary: a bad trigger or a non-positive step count is a request
error, never a silently stored setting. Unknown keys (a setting an older version stored)
are ignored.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, PositiveInt, field_validator

from shared.models.agents import ReflectionOverrides, trimmed
from shared.setting_choices import MergeMode, ReflectionTrigger

DEFAULT_TRIGGER: ReflectionTrigger = "compaction-event"
DEFAULT_STEP_COUNT = 25
DEFAULT_MERGE: MergeMode = "auto"


class ReflectionSettings(BaseModel):
    """The resolved settings one agent runs with."""

    model_config = ConfigDict(frozen=True)

    trigger: ReflectionTrigger = DEFAULT_TRIGGER
    step_count: PositiveInt = DEFAULT_STEP_COUNT
    """``step-count`` fires once this many assistant steps are unreflected."""
    merge: MergeMode = DEFAULT_MERGE
    """``auto``: the worker merges; ``explicit``: the agent reviews before applying."""
    merge_instructions: str = ""

    _trim = field_validator("merge_instructions")(trimmed)

    def public(self) -> dict[str, str | int]:
        """The client-facing shape, e.g. ``{"trigger":"step-count","stepCount":3,...}``."""
        shown: dict[str, str | int] = {
            "trigger": self.trigger,
            "stepCount": self.step_count,
            "merge": self.merge,
        }
        if self.merge_instructions:
            shown["mergeInstructions"] = self.merge_instructions
        return shown


def resolve(
    defaults: ReflectionSettings, overrides: ReflectionOverrides | None
) -> ReflectionSettings:
    """``defaults`` with every field ``overrides`` sets replaced, field by field."""
    if overrides is None:
        return defaults
    return ReflectionSettings.model_validate(
        {**defaults.model_dump(), **overrides.model_dump(exclude_none=True)}
    )


class ConfiguredDefaults(Protocol):
    """The daemon-wide reflection settings (``AGENTD_REFLECTION_*``) as
    :class:`shared.settings.Settings` holds them; named here, since settings sit above
    this layer."""

    reflection_trigger: ReflectionTrigger
    reflection_step_count: int
    reflection_merge: MergeMode


def configured_defaults(settings: ConfiguredDefaults) -> ReflectionSettings:
    """The daemon-wide layer (``AGENTD_REFLECTION_*``) every agent inherits from."""
    return ReflectionSettings(
        trigger=settings.reflection_trigger,
        step_count=settings.reflection_step_count,
        merge=settings.reflection_merge,
    )
