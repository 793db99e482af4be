"""The outcome log's one shape: what the daemon appends, every reader reads back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from shared.models.reflection import ReflectionOutcome
from shared.reflection import events
from shared.store.layout import ReflectionFiles


def outcome(request_id: str, reason: str | None = None) -> ReflectionOutcome:
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    return ReflectionOutcome(
        reflection_id=f"r-{request_id}",
        request_id=request_id,
        agent_id="a1",
        conversation_ids=["c1"],
        trigger="manual",
        status="skipped" if reason else "merged",
        reason=reason,
        message="done",
        started_at=at,
        finished_at=at,
    )


def test_what_the_daemon_appends_is_read_back_and_a_torn_line_is_skipped(
    tmp_path: Path,
) -> None:
    first, second = outcome("rq-1"), outcome("rq-2")
    events.append(tmp_path, first)
    with ReflectionFiles(tmp_path).outcome_log.open("a") as log:
        log.write('{"reflection_id": "cut short by a cra')
    events.append(tmp_path, second)

    assert events.read(tmp_path) == [first, second]
    assert events.read(tmp_path, tail=1) == [second]
    assert events.read(tmp_path / "nowhere") == []


def test_only_already_active_leaves_its_request_open() -> None:
    assert events.answers_request(outcome("rq-1"))
    assert not events.answers_request(outcome("rq-1", reason="already_active"))
