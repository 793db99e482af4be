"""The worker's entry point: ``celery -A reflector.worker worker …`` (what ``agentd up``,
the Procfile and the systemd unit run).

Celery's command line loads an app by name and cannot call a factory, so this module is
the one place a worker process reads its :class:`Settings` and builds its app; the rest
of ``reflector`` is configured only through :func:`reflector.app.create_app`.

Logging is set up here, before the app exists, so that every line the worker writes is
one of ours: the keys taken at start, and Celery's warning about running as root (sent
before Celery asks for logging to be set up). That warning and Celery's start-up banner
go to the log file at DEBUG instead of the console: one line per worker says it is ready.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog
from celery import signals
from celery.exceptions import SecurityWarning

from reflector.app import create_app
from shared.logging import configure, file_only
from shared.priority import lower_this_thread
from shared.providers.credentials import receive_keys, take_provider_keys
from shared.settings import Settings
from shared.store.permissions import private_umask

BANNER_LOGGER = "reflector.banner"


class _RootWarningToDebug(logging.Filter):
    """Celery's ``SecurityWarning`` (a worker running as root) becomes a DEBUG record: the
    log file keeps it, the console shows it only at ``AGENTD_LOG_LEVEL=DEBUG``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if SecurityWarning.__name__ in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _banner_to_the_log(instance: Any = None, **_: Any) -> None:
    """Sent just before Celery prints its banner to stdout: log it instead."""
    if getattr(instance, "app", None) is not app:
        return
    instance.quiet = True
    banner = instance.startup_info(artlines=False) + (instance.extra_info() or "")
    structlog.get_logger(BANNER_LOGGER).debug("celery_banner", banner=banner.strip())


receive_keys()  # handed over by `agentd up` on a descriptor, never in the environment
settings = Settings()
if settings.worker_dir.absolute().resolve().is_relative_to(settings.home.absolute().resolve()):
    raise SystemExit(
        f"reflector: AGENTD_WORKER_DIR ({settings.worker_dir}) is inside AGENTD_HOME "
        f"({settings.home}); a worker writes nothing of the daemon's home: point it elsewhere"
    )
lower_this_thread()  # reflection is background work: the daemon's loop gets the CPU first
private_umask()  # before the first file: the log
configure(
    "reflector",
    level=settings.log_level,
    console_format=settings.log_format,
    log_dir=settings.worker_dir / "logs",
)
logging.getLogger("py.warnings").addFilter(_RootWarningToDebug())
file_only(BANNER_LOGGER)
# Out of the environment before a sub-agent's shell can start (shared/providers/credentials.py).
app = create_app(settings, provider_keys=take_provider_keys())
signals.celeryd_after_setup.connect(_banner_to_the_log, weak=False)
