"""Reflection settings: when to reflect (trigger) and how the result lands (merge mode).

Defaults come from the daemon's configuration; an agent stores only what it overrides
(``None`` inherits), so changing a default reaches every agent that did not choose
otherwise. Values are validated at this boundary: a bad trigger or a non-positive step
count is a request error, never a silently stored setting. Unknown keys (a setting an
older version stored) are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, PositiveInt, field_validator

from shared.protocol import MergeMode, ReflectionTrigger

if TYPE_CHECKING:
    from shared.settings import Settings

DEFAULT_TRIGGER: ReflectionTrigger = "compaction-event"
DEFAULT_STEP_COUNT = 25
DEFAULT_MERGE: MergeMode = "auto"


def _trimmed(value: str | None) -> str | None:
    return value.strip() if isinstance(value, str) else value


class ReflectionSettings(BaseModel):
    """The resolved settings one agent runs with."""

    model_config = ConfigDict(frozen=True)

    trigger: ReflectionTrigger = DEFAULT_TRIGGER
    step_count: PositiveInt = DEFAULT_STEP_COUNT
    """``step-count`` fires once this many assistant steps are unreflected."""
    merge: MergeMode = DEFAULT_MERGE
    """``auto``: the worker merges; ``explicit``: the agent reviews before applying."""
    merge_instructions: str = ""

    _trim = field_validator("merge_instructions")(_trimmed)

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


class ReflectionOverrides(BaseModel):
    """What an agent overrides; a field left ``None`` inherits the default."""

    model_config = ConfigDict(frozen=True)

    trigger: ReflectionTrigger | None = None
    step_count: PositiveInt | None = None
    merge: MergeMode | None = None
    merge_instructions: str | None = None

    _trim = field_validator("merge_instructions")(_trimmed)


def resolve(
    defaults: ReflectionSettings, overrides: ReflectionOverrides | None
) -> ReflectionSettings:
    """``defaults`` with every field ``overrides`` sets replaced, field by field."""
    if overrides is None:
        return defaults
    return ReflectionSettings.model_validate(
        {**defaults.model_dump(), **overrides.model_dump(exclude_none=True)}
    )


def configured_defaults(settings: Settings) -> ReflectionSettings:
    """The daemon-wide layer (``AGENTD_REFLECTION_*``) every agent inherits from."""
    return ReflectionSettings(
        trigger=settings.reflection_trigger,
        step_count=settings.reflection_step_count,
        merge=settings.reflection_merge,
    )
