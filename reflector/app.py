"""The Celery app of the reflection workers, built from one :class:`Settings` by
:func:`create_app`: importing this module configures nothing and reads no environment.

At-least-once delivery, nothing clever. Late acks with reject-on-worker-lost redeliver a
job whose worker died; prefetch 1 keeps a slow job from holding others hostage; the time
limit bounds a sub-agent that hangs and the visibility timeout is above it, so a running
job is never handed out twice merely for being slow. No long countdowns: backoff is a
gate the daemon checks, and its reconcile loop re-sends what is due. At worker
start, messages left unacked by a worker that died are restored at once (valid while
this machine runs the only worker node; with several hosts, set
``AGENTD_RESTORE_UNACKED=0`` and rely on the visibility timeout, or on the daemon, which
sends a job again once its dead worker's lease has expired).

Celery's signals are process-wide, so each handler checks that the worker, consumer or
task it is told about belongs to this app; only ``setup_logging`` names no sender (a
worker process builds one app, so there is no other to confuse it with).
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Celery, signals

from reflector.scratch import sweep_dead_jobs
from reflector.startup import Heartbeat, restore_unacked
from reflector.tasks import register_reflect
from reflector.work import agentd_version
from shared.coordination import redis_keys
from shared.coordination.broker import RedisLocation, locate
from shared.logging import configure
from shared.providers.credentials import ProviderKeys
from shared.settings import Settings
from shared.store.permissions import private_umask

TASK_TIME_LIMIT_S = 20 * 60
VISIBILITY_TIMEOUT_S = 2 * 3600


def create_app(settings: Settings, provider_keys: ProviderKeys | None = None) -> Celery:
    """A worker app whose broker, logging, start-up and task all follow ``settings``;
    ``provider_keys`` are the keys the worker took out of its environment."""
    location = locate(settings)
    app = Celery("agentd-reflector", broker=location.celery_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=TASK_TIME_LIMIT_S,
        task_soft_time_limit=TASK_TIME_LIMIT_S - 60,
        task_default_queue=redis_keys.REFLECTION_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_use_ssl=location.celery_ssl,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_transport_options={
            "visibility_timeout": VISIBILITY_TIMEOUT_S,
            "unacked_restore_interval": 5,
            "unacked_restore_throttle": 1,
        },
    )
    register_reflect(app, settings, location, provider_keys)
    _connect_lifecycle(app, settings, location)
    return app


def _connect_lifecycle(app: Celery, settings: Settings, location: RedisLocation) -> None:
    """Logging, the start-up sweep and the heartbeat of a worker running ``app``."""
    heartbeat = Heartbeat(location.redis_url)

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

    def worker_init(sender: object = None, **_: Any) -> None:
        if ours(sender) and settings.restore_unacked:
            restore_unacked(location)

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
    signals.worker_init.connect(worker_init, weak=False)
    signals.worker_ready.connect(worker_ready, weak=False)
    signals.worker_shutdown.connect(worker_shutdown, weak=False)
    signals.task_prerun.connect(task_prerun, weak=False)
    signals.task_postrun.connect(task_postrun, weak=False)
