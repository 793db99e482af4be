"""Payloads for tests that need a summary or a stop record and care only about its text."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.models.messages import CompactionStats, StopPayload, SummaryPayload


def summary_payload(
    summary: str = "earlier messages",
    *,
    kept_ids: list[str] | None = None,
    at: datetime = datetime(2026, 11, 30, tzinfo=UTC),
) -> SummaryPayload:
    stats = CompactionStats(
        trigger="context_pressure",
        messages_before=3,
        messages_after=2,
        summarised=2,
        tokens_before=900,
        tokens_after=300,
        window=1000,
        threshold=800,
        floor=100,
        at=at,
    )
    return SummaryPayload(summary=summary, compaction=stats, kept_ids=kept_ids or [])


def stop_payload(code: str = "provider_http_error") -> StopPayload:
    return StopPayload(code=code)
