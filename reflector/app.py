"""The Celery app of the reflection workers, built from one :class:`Settings` by
:func:`create_app`: importing this module configures nothing and reads no environment.

Celery is the transport and nothing more: it acknowledges a message as a worker starts
the job and never hands it out again by itself. A job whose worker dies is the daemon's to
send again, once the agent's lease says nobody runs it (:mod:`shared.coordination.jobs`):
one owner for every lost job, whether a pool process died, the whole worker or its host,
which Celery's late acks, reject-on-worker-lost, unacked restore at start and visibility
timeout each covered in part (and on one host only) before. A worker takes a message only
when one of its processes is free (``worker_disable_prefetch``: with early acks, prefetch 1
alone would still reserve one job behind a running one, hostage to it, where another
worker is idle); the time limit (``AGENTD_REFLECTION_TIME_LIMIT_S``) bounds a
sub-agent that hangs, so a live lease always means a job that may still answer. No long
countdowns: backoff is a gate the daemon checks.

Celery's signals are process-wide, so each handler checks that the worker, consumer or
task it is told about belongs to this app; only ``setup_logging`` names no sender (a
worker process builds one app, so there is no other to confuse it with).
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Celery, signals

from reflector.scratch import sweep_dead_jobs
from reflector.startup import Heartbeat
from reflector.tasks import register_reflect
from reflector.work import agentd_version
from shared.coordination import redis_keys
from shared.coordination.broker import RedisLocation, locate
from shared.logging import configure
from shared.providers.credentials import ProviderKeys
from shared.settings import Settings
from shared.store.permissions import private_umask

SOFT_LIMIT_AHEAD_S = 60
"""The soft time limit comes this long before the hard one: time for the job to answer
``failed: time_limit`` and let its lease go."""


def create_app(settings: Settings, provider_keys: ProviderKeys | None = None) -> Celery:
    """A worker app whose broker, logging, start-up and task all follow ``settings``;
    ``provider_keys`` are the keys the worker took out of its environment."""
    location = locate(settings)
    app = Celery("agentd-reflector", broker=location.celery_url, set_as_current=False)
    app.conf.update(
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,
        task_time_limit=settings.reflection_time_limit_s,
        task_soft_time_limit=settings.reflection_time_limit_s - SOFT_LIMIT_AHEAD_S,
        task_default_queue=redis_keys.REFLECTION_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=location.timeout_s,
        broker_use_ssl=location.celery_ssl,
        worker_hijack_root_logger=False,
        # It cancels late-ack jobs only, and there are none: set, so that Celery does not
        # warn of its coming default at every lost connection. A job runs on through a
        # Redis restart and answers.
        worker_cancel_long_running_tasks_on_connection_loss=True,
    )
    register_reflect(app, settings, location, provider_keys)
    _connect_lifecycle(app, settings, location)
    return app


def _connect_lifecycle(app: Celery, settings: Settings, location: RedisLocation) -> None:
    """Logging, the start-up sweep and the heartbeat of a worker running ``app``."""
    heartbeat = Heartbeat(location, settings.worker_heartbeat_s)

    def ours(sender: object) -> bool:
        return getattr(sender, "app", None) is app

    def celeryd_init(instance: object = None, **_: Any) -> None:
        if ours(instance):
            private_umask()  # before the worker creates its first file, its log

    def setup_logging(**_: Any) -> None:
        configure(
            "reflector",
            level=settings.log_level,
            console_format=settings.log_format,
            log_dir=settings.worker_dir / "logs",
        )

    def worker_ready(sender: object = None, **_: Any) -> None:
        """Clear what this host's dead jobs left in its scratch; announce."""
        if not ours(sender):
            return
        from shared import sandbox

        log = structlog.get_logger("reflector")
        swept = sweep_dead_jobs(settings.worker_dir)
        log.info("reflector_ready", sandbox=sandbox.reason(), swept=swept)
        concurrency = getattr(sender, "concurrency", None)
        heartbeat.start(getattr(sender, "hostname", None), agentd_version(), concurrency)

    def worker_shutdown(sender: object = None, **_: Any) -> None:
        if ours(sender):
            heartbeat.stop()

    def task_prerun(
        sender: object = None,
        task_id: str | None = None,
        kwargs: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        structlog.contextvars.clear_contextvars()
        if ours(sender):
            request = (kwargs or {}).get("request") or {}
            structlog.contextvars.bind_contextvars(job_id=task_id, agent_id=request.get("agent_id"))

    def task_postrun(**_: Any) -> None:
        structlog.contextvars.clear_contextvars()

    # weak=False: the handlers are closures that nothing else holds on to.
    signals.celeryd_init.connect(celeryd_init, weak=False)
    signals.setup_logging.connect(setup_logging, weak=False)
    signals.worker_ready.connect(worker_ready, weak=False)
    signals.worker_shutdown.connect(worker_shutdown, weak=False)
    signals.task_prerun.connect(task_prerun, weak=False)
    signals.task_postrun.connect(task_postrun, weak=False)
