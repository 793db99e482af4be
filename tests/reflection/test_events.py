"""The outcome's one shape: what a worker writes, the daemon reads, on disk and on the stream.

Before, the writer (``reflector/outcomes.py``) and the reader (``agentd``) each spelled the
log's name, the stream's name and the entry's field; a rename on one side would have gone
silent. Now both import :mod:`shared.reflection.events`, and no other module spells them.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

from shared.models.reflection import ReflectionOutcome
from shared.reflection import events
from shared.store.layout import ReflectionFiles

ROOT = Path(__file__).resolve().parents[2]
SPELLINGS = {events.OUTCOME_STREAM}


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


def test_what_a_worker_appends_the_daemon_reads_back_and_a_torn_line_is_skipped(
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


def test_a_stream_entry_carries_the_outcome_and_anything_else_is_ignored() -> None:
    sent = outcome("rq-1")
    fields = {key.encode(): value.encode() for key, value in events.stream_fields(sent).items()}

    assert events.from_stream(fields) == sent
    assert events.from_stream({b"other": b"x"}) is None
    assert events.from_stream({events.OUTCOME_FIELD.encode(): b"{not json"}) is None


def test_only_already_active_leaves_its_request_open() -> None:
    assert events.answers_request(outcome("rq-1"))
    assert not events.answers_request(outcome("rq-1", reason="already_active"))


def test_no_other_module_spells_the_stream() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}: {node.value!r}"
        for package in ("agentd", "reflector", "shared")
        for path in (ROOT / package).rglob("*.py")
        if path != ROOT / "shared/reflection/events.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in SPELLINGS
    ]
    assert spelled == []
