"""The Celery task: decode the request, run the pipeline, record the outcome.

Everything else lives in :mod:`reflector.pipeline`; this module only adapts Celery to it.
"""

from __future__ import annotations

from typing import Any

import redis
import structlog
from celery import Celery
from pydantic import ValidationError

from reflector.gates import model_setup
from reflector.pipeline import JobContext, run_job
from shared.clock import user_zone
from shared.coordination import keys
from shared.coordination.broker import RedisLocation
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionRequest
from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
from shared.providers.keys import ProviderKeys
from shared.providers.latency import WithLatency
from shared.providers.mock import MOCK_MODEL
from shared.settings import Settings

log = structlog.get_logger(__name__)

REDIS_TIMEOUT_S = 10.0
"""A Redis that stops answering fails the job's next call instead of hanging the worker."""


class Reflect:
    """One worker's way of running a reflection request: its settings, its Redis, and the
    providers it builds once and reuses across jobs."""

    def __init__(
        self, settings: Settings, location: RedisLocation, keys: ProviderKeys | None = None
    ) -> None:
        self.settings = settings
        self.location = location
        self._providers = ProviderFactory(settings, keys)

    def provider_for(self, agent: AgentRecord) -> Provider:
        model = self.settings.reflection_model or agent.model or self.settings.model
        if model == MOCK_MODEL:
            from shared.providers.mock_reflector import MockReflector

            reflector = MockReflector(timezone_name=self.settings.timezone)
            latency = self.settings.mock_latency_s
            return WithLatency(reflector, latency) if latency else reflector
        return self._providers.get(model, self.settings.reflection_context_window)

    def agent_provider_for(self, agent: AgentRecord) -> Provider:
        return self._providers.get(agent.model, agent.context_window)

    def setup_of(self, agent: AgentRecord) -> str:
        """The digest of :meth:`provider_for`'s setup, this worker's keys included: a
        pause for a wrong key lifts once agentd runs with another."""
        keys = self._providers.keys
        held = sorted(keys.values.items()) if keys is not None else []
        return model_setup(self.settings, agent, [f"{name}={value}" for name, value in held])

    def __call__(self, request: dict[str, Any], job_id: str) -> dict[str, Any] | None:
        try:
            parsed = ReflectionRequest.model_validate(request)
        except ValidationError as exc:
            log.error("undecodable_reflection_request", error=str(exc))
            return None
        zone, zone_name = user_zone(self.settings.timezone)
        client = redis.Redis.from_url(
            self.location.redis_url,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            socket_timeout=REDIS_TIMEOUT_S,
        )
        context = JobContext(
            settings=self.settings,
            redis=client,
            provider_for=self.provider_for,
            agent_provider_for=self.agent_provider_for,
            setup_of=self.setup_of,
            local_zone=zone,
            timezone_name=zone_name,
        )
        try:
            outcome = run_job(parsed, job_id, context)
            return outcome.model_dump(mode="json") if outcome is not None else None
        finally:
            client.close()


def register_reflect(
    app: Celery, settings: Settings, location: RedisLocation, provider_keys: ProviderKeys | None
) -> None:
    """Register :data:`keys.REFLECT_TASK` on ``app``: the name the daemon sends by."""
    reflect = Reflect(settings, location, provider_keys)

    @app.task(name=keys.REFLECT_TASK, bind=True)
    def _reflect(self: Any, request: dict[str, Any]) -> dict[str, Any] | None:
        return reflect(request, self.request.id)
