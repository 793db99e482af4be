"""The Celery app of the reflection workers: at-least-once delivery, nothing clever.

Late acks with reject-on-worker-lost redeliver a job whose worker died; prefetch 1 keeps
a slow job from holding others hostage; the time limit bounds a sub-agent that hangs and
the visibility timeout is above it, so a running job is never handed out twice merely for
being slow. No long countdowns: backoff is a gate the job checks, and the daemon's
reconcile loop re-sends what is due. At worker start, messages left unacked by a worker
that died are restored at once (valid while this machine runs the only worker node;
with several hosts, set AGENTD_RESTORE_UNACKED=0 and rely on the visibility timeout).
"""

from __future__ import annotations

import os

from celery import Celery, signals

from shared.coordination import keys
from shared.coordination.broker import locate
from shared.logging import configure
from shared.settings import Settings

TASK_TIME_LIMIT_S = 20 * 60
VISIBILITY_TIMEOUT_S = 2 * 3600

settings = Settings()
location = locate(settings)

app = Celery("agentd-reflector", broker=location.celery_url, include=["reflector.tasks"])
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=TASK_TIME_LIMIT_S,
    task_soft_time_limit=TASK_TIME_LIMIT_S - 60,
    task_default_queue=keys.REFLECTION_QUEUE,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_cancel_long_running_tasks_on_connection_loss=True,
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
    },
)


@signals.setup_logging.connect
def _logging(**_: object) -> None:
    configure(
        "reflector",
        level=settings.log_level,
        console_format=settings.log_format,
        log_dir=settings.layout.logs_dir,
    )


@signals.worker_init.connect
def _restore_orphans(**_: object) -> None:
    """Requeue messages a dead worker left unacked (single-node deployments)."""
    if os.environ.get("AGENTD_RESTORE_UNACKED", "1") != "1":
        return
    import kombu

    with kombu.Connection(
        location.celery_url, transport_options={"visibility_timeout": 0}
    ) as connection:
        connection.default_channel.qos.restore_visible(num=None)


@signals.worker_ready.connect
def _sweep_and_report(sender: object = None, **_: object) -> None:
    """At start-up: clean what dead workers left, where no live job holds the agent."""
    import structlog

    from reflector.startup import start_heartbeat, sweep_idle_agents
    from reflector.tools import sandbox_reason

    log = structlog.get_logger("reflector")
    log.info("reflector_ready", sandbox=sandbox_reason(), swept=sweep_idle_agents(settings))
    start_heartbeat(location.redis_url, sender)


@signals.task_prerun.connect
def _bind_ids(task_id: str | None = None, kwargs: dict | None = None, **_: object) -> None:
    import structlog

    structlog.contextvars.clear_contextvars()
    request = (kwargs or {}).get("request") or {}
    structlog.contextvars.bind_contextvars(job_id=task_id, agent_id=request.get("agent_id"))


@signals.task_postrun.connect
def _unbind_ids(**_: object) -> None:
    import structlog

    structlog.contextvars.clear_contextvars()
