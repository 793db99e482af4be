"""The outbox: requests on disk first; one pending request per slice; retries get new ids."""

from __future__ import annotations

from pathlib import Path

from agentd.outbox import Outbox
from shared.coordination.broker import locate
from shared.models.reflection import ReflectionOutcome
from shared.settings import Settings
from shared.store.layout import Layout


def _outbox(home: Path) -> Outbox:
    return Outbox(Layout(home), locate(Settings(home=home)))


def test_requests_for_a_pending_slice_collapse_and_a_settled_one_is_asked_again(
    agentd_home: Path,
) -> None:
    outbox = _outbox(agentd_home)
    first = outbox.submit("agent-1", "step-count", ["c1"], slice_key="agent-1:c1:None")
    again = outbox.submit("agent-1", "step-count", ["c1"], slice_key="agent-1:c1:None")
    other = outbox.submit("agent-1", "step-count", ["c2"], slice_key="agent-1:c2:None")
    assert again.request_id == first.request_id != other.request_id
    assert len(list(outbox.directory("agent-1").glob("*.json"))) == 2

    outbox.complete(
        ReflectionOutcome(
            reflection_id="r",
            request_id=first.request_id,
            agent_id="agent-1",
            trigger="step-count",
            status="failed",
            reason="merge_conflict",
        )
    )
    retry = outbox.submit("agent-1", "step-count", ["c1"], slice_key="agent-1:c1:None")

    assert retry.request_id != first.request_id  # a new job, not a no-op replay
