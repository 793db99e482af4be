"""Reflection settings: defaults, per-agent overrides resolved field by field, validation
and the client-facing shape (spec §1; §7 item 36 as it applies to one override layer)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shared.reflection.policy import ReflectionOverrides, ReflectionSettings, resolve


def test_the_defaults_are_compaction_event_25_steps_and_auto_merge() -> None:
    settings = ReflectionSettings()

    assert settings.trigger == "compaction-event"
    assert settings.step_count == 25
    assert settings.merge == "auto"
    assert settings.merge_instructions == ""


def test_the_public_shape_starts_like_mini_lettas_sleeptime_output() -> None:
    settings = resolve(
        ReflectionSettings(), ReflectionOverrides(trigger="step-count", step_count=3)
    )

    text = json.dumps(settings.public(), separators=(",", ":"))

    assert text.startswith('{"trigger":"step-count","stepCount":3,')
    assert settings.public() == {"trigger": "step-count", "stepCount": 3, "merge": "auto"}


def test_merge_instructions_are_trimmed_and_shown_only_when_set() -> None:
    settings = ReflectionSettings(merge="explicit", merge_instructions="  keep it short \n")

    assert settings.public() == {
        "trigger": "compaction-event",
        "stepCount": 25,
        "merge": "explicit",
        "mergeInstructions": "keep it short",
    }
    assert ReflectionOverrides(merge_instructions=" x ").merge_instructions == "x"


def test_no_overrides_resolve_to_the_defaults() -> None:
    defaults = ReflectionSettings(trigger="off", step_count=7)

    assert resolve(defaults, None) == defaults
    assert resolve(defaults, ReflectionOverrides()) == defaults


def test_overrides_win_field_by_field_and_unset_fields_inherit() -> None:
    defaults = ReflectionSettings(trigger="step-count", step_count=10, merge_instructions="d")

    resolved = resolve(defaults, ReflectionOverrides(step_count=4, merge="explicit"))

    assert resolved == ReflectionSettings(
        trigger="step-count", step_count=4, merge="explicit", merge_instructions="d"
    )


def test_a_changed_default_reaches_agents_that_did_not_override_it() -> None:
    overrides = ReflectionOverrides(step_count=4)

    before = resolve(ReflectionSettings(trigger="compaction-event"), overrides)
    after = resolve(ReflectionSettings(trigger="step-count"), overrides)

    assert (before.trigger, before.step_count) == ("compaction-event", 4)
    assert (after.trigger, after.step_count) == ("step-count", 4)


def test_an_override_to_an_empty_instruction_clears_the_default() -> None:
    resolved = resolve(
        ReflectionSettings(merge_instructions="review"),
        ReflectionOverrides(merge_instructions=""),
    )

    assert resolved.merge_instructions == ""


@pytest.mark.parametrize(
    "fields",
    [
        {"trigger": "sometimes"},
        {"step_count": 0},
        {"step_count": -3},
        {"merge": "manual"},
        {"merge_instructions": 5},
    ],
)
def test_invalid_values_are_refused_at_the_boundary(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ReflectionOverrides.model_validate(fields)
    with pytest.raises(ValidationError):
        ReflectionSettings.model_validate(fields)


def test_unknown_stored_keys_are_ignored() -> None:
    overrides = ReflectionOverrides.model_validate({"reflectionBehavior": "x", "trigger": "off"})

    assert overrides == ReflectionOverrides(trigger="off")


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        ReflectionSettings().trigger = "off"  # type: ignore[misc]


def test_overrides_round_trip_through_json_with_unset_fields_as_null() -> None:
    overrides = ReflectionOverrides(trigger="off")

    assert ReflectionOverrides.model_validate_json(overrides.model_dump_json()) == overrides
