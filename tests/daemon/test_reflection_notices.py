"""Which reflection outcomes a chat shows: automatic failures once per kind, until a
success; manual runs and successes always."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentd.reflection.reflections import Reflections
from shared.coordination.broker import locate
from shared.models.reflection import ReflectionOutcome
from shared.reflection.pause import Pause
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.layout import Layout


@pytest.fixture
def reflections(agentd_home: Path) -> Reflections:
    settings = Settings(home=agentd_home)
    layout = Layout(agentd_home)
    return Reflections(settings, layout, locate(settings), AgentStore(layout))


def _outcome(
    status: str, reason: str | None = None, trigger: str = "step-count"
) -> ReflectionOutcome:
    return ReflectionOutcome(
        reflection_id="r",
        request_id="q",
        agent_id="a",
        trigger=trigger,
        status=status,
        reason=reason,
    )  # type: ignore[arg-type]


def test_an_automatic_failure_is_told_once_per_kind_until_a_success(
    reflections: Reflections,
) -> None:
    told = [
        reflections.worth_telling(_outcome(*args))
        for args in [
            ("failed", "merge_conflict"),
            ("failed", "merge_conflict"),
            ("failed", "parent_dirty"),
            ("failed", "merge_conflict", "manual"),
            ("merged",),
            ("failed", "merge_conflict"),
            ("skipped", "no_payload"),
        ]
    ]
    assert told == [True, False, True, True, True, True, False]


def test_every_held_reflection_is_told_since_each_waits_for_its_own_answer(
    reflections: Reflections,
) -> None:
    told = [
        reflections.worth_telling(_outcome(*args))
        for args in [
            ("held", "system_file_deleted"),
            ("held", "system_file_deleted"),
            ("failed", "merge_conflict"),
            ("held", "lines_removed"),
            ("failed", "merge_conflict"),
        ]
    ]
    assert told == [True, True, True, True, False]


def test_a_failure_that_paused_the_agent_is_told_by_the_pause_and_never_silently_dropped(
    reflections: Reflections,
) -> None:
    pause = Pause(reason="provider_auth", message="m", setup="s", since=datetime.now(UTC))
    failed = _outcome("failed", "provider_auth")

    assert not reflections.worth_telling(failed, pause)  # the pause's warning says it
    assert reflections.worth_telling(failed)  # with no pause to tell, the failure is told
    assert reflections.worth_telling(_outcome("failed", "provider_http"), pause)
