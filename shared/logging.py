"""structlog for every agentd process: JSON lines in a file, readable lines on a console.

Records from the standard library (Celery, kombu, litellm, asyncio) go through the same
processors, so one log holds everything with the same fields. Ids bound with
``structlog.contextvars.bound_contextvars`` (agent, conversation, turn, job) appear on
every line logged inside that block, stdlib records included.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

import structlog

_QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore", "git.cmd")
LOG_FILE_BYTES = 20 * 1024 * 1024
LOG_FILE_BACKUPS = 5


def _add_static(service: str) -> Any:
    pid = os.getpid()

    def add(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("service", service)
        event.setdefault("pid", pid)
        return event

    return add


def configure(
    service: str,
    *,
    level: str = "INFO",
    console_format: str = "auto",
    log_dir: Path | None = None,
) -> None:
    """Set up logging for ``service``; ``log_dir`` adds a rotating JSON file ``<service>.log``."""
    shared: list[Any] = [
        _add_static(service),
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    json_tail = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    use_json = console_format == "json" or (console_format == "auto" and not sys.stderr.isatty())
    console_tail = (
        json_tail if use_json else [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    )
    handlers: list[logging.Handler] = [
        _handler(logging.StreamHandler(sys.stderr), shared, console_tail)
    ]
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        file_handler = logging.handlers.RotatingFileHandler(
            log_dir / f"{service}.log",
            maxBytes=LOG_FILE_BYTES,
            backupCount=LOG_FILE_BACKUPS,
            encoding="utf-8",
        )
        handlers.append(_handler(file_handler, shared, json_tail))
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def _handler(handler: logging.Handler, shared: list[Any], tail: list[Any]) -> logging.Handler:
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
        )
    )
    return handler
