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
REDIS_TIMEOUT_S = 10.0
"""A Redis that stops answering fails the job's next call instead of hanging the worker."""


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


@app.task(name=keys.REFLECT_TASK, bind=True)
def reflect(self: Any, request: dict[str, Any]) -> dict[str, Any] | None:
    try:
        parsed = ReflectionRequest.model_validate(request)
    except ValidationError as exc:
        log.error("undecodable_reflection_request", error=str(exc))
        return None
    zone, zone_name = user_zone(settings.timezone)
    client = redis.Redis.from_url(
        location.redis_url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    context = JobContext(
        settings=settings,
        redis=client,
        provider_for=_provider_for,
        agent_provider_for=_agent_provider_for,
        local_zone=zone,
        timezone_name=zone_name,
    )
    try:
        return run_job(parsed, self.request.id, context).model_dump(mode="json")
    finally:
        client.close()
