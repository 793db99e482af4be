"""The Celery task: decode the request, run the pipeline, record the outcome.

Everything else lives in :mod:`reflector.pipeline`; this module only adapts Celery to it.
"""

from __future__ import annotations

from typing import Any

import redis
import structlog
from pydantic import ValidationError

from reflector.app import app, location, settings
from reflector.pipeline import JobContext, run_job
from shared.clock import user_zone
from shared.coordination import keys
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionRequest
from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
from shared.providers.latency import WithLatency
from shared.providers.mock import MOCK_MODEL

log = structlog.get_logger(__name__)

_providers = ProviderFactory(settings)


def _provider_for(agent: AgentRecord) -> Provider:
    model = settings.reflection_model or agent.model or settings.model
    if model == MOCK_MODEL:
        from shared.providers.mock_reflector import MockReflector

        reflector = MockReflector(timezone_name=settings.timezone)
        latency = settings.mock_latency_s
        return WithLatency(reflector, latency) if latency else reflector
    return _providers.get(model, settings.reflection_context_window)


def _agent_provider_for(agent: AgentRecord) -> Provider:
    return _providers.get(agent.model, agent.context_window)


def _send_follow_up(request: ReflectionRequest) -> None:
    app.send_task(
        keys.REFLECT_TASK,
        kwargs={"request": request.model_dump(mode="json")},
        queue=keys.REFLECTION_QUEUE,
        task_id=request.request_id,
    )


@app.task(name=keys.REFLECT_TASK, bind=True)
def reflect(self: Any, request: dict[str, Any]) -> dict[str, Any] | None:
    try:
        parsed = ReflectionRequest.model_validate(request)
    except ValidationError as exc:
        log.error("undecodable_reflection_request", error=str(exc))
        return None
    zone, zone_name = user_zone(settings.timezone)
    context = JobContext(
        settings=settings,
        redis=redis.Redis.from_url(location.redis_url),
        provider_for=_provider_for,
        agent_provider_for=_agent_provider_for,
        send_follow_up=_send_follow_up,
        local_zone=zone,
        timezone_name=zone_name,
    )
    return run_job(parsed, self.request.id, context).model_dump(mode="json")
