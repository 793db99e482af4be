"""The Celery task: take the job message, run the job (:mod:`reflector.work`), answer.

Everything else lives in :mod:`reflector.work`; this module only adapts Celery to it and
builds, once per worker, the providers of this host's model settings.
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Celery

from reflector.gates import model_setup
from reflector.work import RedisTransfer, WorkerContext, run_work
from shared.coordination import redis_keys
from shared.coordination.broker import RedisLocation
from shared.providers.base import Provider
from shared.providers.credentials import ProviderKeys
from shared.providers.factory import ProviderFactory
from shared.providers.latency import WithLatency
from shared.providers.mock import MOCK_MODEL
from shared.reflection.job import JobInput
from shared.settings import Settings

log = structlog.get_logger(__name__)


class Reflect:
    """One worker's way of running a reflection job: its settings, its Redis, and the
    providers it builds once and reuses across jobs. Which model a job runs is the
    agent's, as the daemon resolved it (the job says), unless this host names its own
    (``AGENTD_REFLECTION_MODEL``, ``AGENTD_REFLECTION_CONTEXT_WINDOW``); how to reach it —
    api base, keys, timeouts — is always this host's."""

    def __init__(
        self,
        settings: Settings,
        location: RedisLocation,
        keys: ProviderKeys | None = None,
        worker: str = "",
    ) -> None:
        self.settings = settings
        self.location = location
        self.worker = worker
        self._providers = ProviderFactory(settings, keys)

    def model_of(self, job: JobInput) -> tuple[str, int]:
        """The model and window this worker runs ``job`` with."""
        model = self.settings.reflection_model or job.model
        return model, self.settings.reflection_context_window or job.context_window

    def provider_for(self, job: JobInput) -> Provider:
        model, window = self.model_of(job)
        if model == MOCK_MODEL:
            from shared.providers.mock_reflector import MockReflector

            reflector = MockReflector(timezone_name=job.timezone, context_window=window)
            latency = self.settings.mock_latency_s
            return WithLatency(reflector, latency) if latency else reflector
        return self._providers.get(model, window)

    def setup_of(self, job: JobInput) -> str:
        """The digest of :meth:`provider_for`'s setup, this worker's keys included: a
        pause for a wrong key lifts once a worker runs with another."""
        return self.setup_for(*self.model_of(job))

    def setup_for(self, model: str, window: int | None) -> str:
        keys = self._providers.keys
        held = sorted(keys.values.items()) if keys is not None else []
        credentials = [f"{name}={value}" for name, value in held]
        return model_setup(self.settings, model, window, credentials)

    def __call__(self, job: dict[str, Any]) -> dict[str, Any] | None:
        client = self.location.client()  # a Redis that hangs fails a call, not the worker
        context = WorkerContext(
            settings=self.settings,
            redis=client,
            transfer=RedisTransfer(client),
            provider_for=self.provider_for,
            setup_of=self.setup_of,
            worker=self.worker,
        )
        try:
            answer = run_work(job, context)
            return None if answer is None else {"status": answer.status, "reason": answer.reason}
        finally:
            client.close()


def register_reflect(
    app: Celery, settings: Settings, location: RedisLocation, provider_keys: ProviderKeys | None
) -> None:
    """Register :data:`redis_keys.REFLECT_TASK` on ``app``: the name the daemon sends by.

    On ``app`` alone (``shared=False``): Celery's default also registers a task on every
    app made later in the process, and there the first registered wins, so a second app
    would run the first one's task, with the first one's settings."""
    reflect = Reflect(settings, location, provider_keys)

    @app.task(name=redis_keys.REFLECT_TASK, bind=True, shared=False)
    def _reflect(self: Any, job: dict[str, Any]) -> dict[str, Any] | None:
        reflect.worker = reflect.worker or str(getattr(self.request, "hostname", "") or "")
        return reflect(job)
