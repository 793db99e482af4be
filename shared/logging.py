"""structlog for every agentd process: JSON lines in a file, readable lines on a console.

Records from the standard library (Celery, kombu, litellm, asyncio) go through the same
processors, so one log holds everything with the same fields. Ids bound with
``structlog.contextvars.bound_contextvars`` (agent, conversation, turn, job) appear on
every line logged inside that block, stdlib records included.

What a line may carry: tracebacks are rendered without frame locals (a frame of the
request handler holds the request line, a provider's frame the API key), and every
line, exception text included, passes :func:`shared.redact.redact_secrets` last. Each
process writes its own file (:mod:`shared.log_files`).

The console shows records at the configured level and up; the file takes every record a
logger lets through. So a logger set to DEBUG below an INFO root (:func:`file_only`) keeps
its debug lines out of the console and in the file: Celery's banner and its warning about
running as root go there. Python warnings are logged like any other record, so a JSON
console never gets a raw warning line.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Protocol

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
_configured: tuple[object, ...] | None = None
"""The arguments of the last :func:`configure`, so that a second identical call (a worker
configures at import and again when Celery asks) keeps the handlers and the log slot."""


def _add_static(service: str) -> Any:
    def add(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("service", service)
        event.setdefault("pid", os.getpid())  # per line: a forked child logs its own pid
        return event

    return add


class Console(Protocol):
    """A text stream console lines can go to: a terminal, or ``agentd up``'s relay of
    lines (which is no file)."""

    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...
    def isatty(self) -> bool: ...


def configure(
    service: str,
    *,
    level: str = "INFO",
    console_format: str = "auto",
    log_dir: Path | None = None,
    console: Console | None = None,
) -> None:
    """Set up logging for ``service``; ``log_dir`` adds a rotating JSON file of this
    process's own (``<service>.log``, or ``<service>-<n>.log`` while that one is taken).
    Console lines go to ``console`` (default: stderr), as JSON when ``console_format`` is
    ``json``, or ``auto`` and that stream is no terminal."""
    global _configured
    stream = console or sys.stderr
    arguments = (service, level, console_format, log_dir, stream)
    if arguments == _configured:
        return
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
    use_json = console_format == "json" or (console_format == "auto" and not stream.isatty())
    console_tail = (
        json_tail
        if use_json
        else [
            structlog.processors.format_exc_info,
            redact_secrets,
            _drop_service,
            structlog.dev.ConsoleRenderer(colors=stream.isatty()),
        ]
    )
    console_handler = _handler(logging.StreamHandler(stream), shared, console_tail)
    console_handler.setLevel(level)
    handlers: list[logging.Handler] = [console_handler]
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
    logging.captureWarnings(True)
    _configured = arguments


def file_only(logger_name: str) -> None:
    """Let the DEBUG records of ``logger_name`` reach the log file whatever the configured
    level, and the console only at ``DEBUG``: for output worth keeping that nobody should
    have to read at every start."""
    logging.getLogger(logger_name).setLevel(logging.DEBUG)


def _drop_service(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """On a console the process is known (its terminal, or ``agentd up``'s prefix)."""
    event.pop("service", None)
    return event


def _handler(handler: logging.Handler, shared: list[Any], tail: list[Any]) -> logging.Handler:
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
        )
    )
    return handler
