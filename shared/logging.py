"""structlog for every agentd process: JSON lines in a file, readable lines on a console.

Records from the standard library (Celery, kombu, litellm, asyncio) go through the same
processors, so one log holds everything with the same fields. Ids bound with
``structlog.contextvars.bound_contextvars`` (agent, conversation, turn, job) appear on
every line logged inside that block, stdlib records included.

What a line may carry: tracebacks are rendered without frame locals (a frame of the
request handler holds the request line, a provider's frame the API key), and every
line, exception text included, passes :func:`shared.redact.redact_secrets` last. Each
process writes its own file (:mod:`shared.log_files`).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import structlog
from structlog.tracebacks import ExceptionDictTransformer

from shared.log_files import ProcessLogFile
from shared.redact import redact_secrets

_QUIET_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore", "git.cmd")
LOG_FILE_BYTES = 20 * 1024 * 1024
LOG_FILE_BACKUPS = 5
_STRUCTURED_TRACEBACKS = structlog.processors.ExceptionRenderer(
    ExceptionDictTransformer(show_locals=False)
)
"""``dict_tracebacks`` without frame locals (structlog shows them by default)."""


def _add_static(service: str) -> Any:
    def add(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("service", service)
        event.setdefault("pid", os.getpid())  # per line: a forked child logs its own pid
        return event

    return add


def configure(
    service: str,
    *,
    level: str = "INFO",
    console_format: str = "auto",
    log_dir: Path | None = None,
) -> None:
    """Set up logging for ``service``; ``log_dir`` adds a rotating JSON file of this
    process's own (``<service>.log``, or ``<service>-<n>.log`` while that one is taken)."""
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
    json_tail = [_STRUCTURED_TRACEBACKS, redact_secrets, structlog.processors.JSONRenderer()]
    use_json = console_format == "json" or (console_format == "auto" and not sys.stderr.isatty())
    console_tail = (
        json_tail
        if use_json
        else [
            structlog.processors.format_exc_info,
            redact_secrets,
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ]
    )
    handlers: list[logging.Handler] = [
        _handler(logging.StreamHandler(sys.stderr), shared, console_tail)
    ]
    if log_dir is not None:
        file_handler = ProcessLogFile(
            log_dir, service, max_bytes=LOG_FILE_BYTES, backups=LOG_FILE_BACKUPS
        )
        handlers.append(_handler(file_handler, shared, json_tail))
    root = logging.getLogger()
    for replaced in root.handlers:
        replaced.close()  # a reconfigured process gives its log slot back
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
