"""Retries of a model call: which failures are worth another try, how long to wait, and
the loop that waits, logs and announces each retry.

They live here, not in litellm or the openai SDK (the provider passes ``max_retries=0``
and never litellm's ``num_retries``, which stacks on the SDK's retries and needs
tenacity), so each attempt is exactly one HTTP request, the provider's ``Retry-After`` is
honoured (capped), every retry is logged and announced to the waiting turn
(:mod:`.retry_notices`), and tests inject a ``sleep`` that records instead of waiting. A
plain loop rather than tenacity: the wait depends on the exception (Retry-After), so
tenacity would need the same hand-written wait and logging hooks and would save nothing
but the loop.

Only what may pass by itself is retried with backoff: 429, 5xx and a connection that
broke off. A server that cannot be reached at all (refused, no such host) gets one more
try, for a server that is just restarting; a missing or rejected key, a bad request or an
overflow gets none. Nor does a timeout: the provider has had the whole
``AGENTD_PROVIDER_TIMEOUT_S`` to say something, and a hung provider is reported then
(``provider_timeout``) rather than waited on for as long again, and again.

A streamed answer is retried only while none of its text has been handed on: text the
client was shown cannot be taken back, so a stream that breaks off after it ends the call.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from shared.providers.litellm_errors import Failure, detail, failure_of, http_status
from shared.providers.retry_notices import RetryNotice, announce

log = structlog.get_logger(__name__)

MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
BACKOFF_JITTER_S = 0.5
UNREACHABLE_ATTEMPTS = 2
"""A refused connection or an unknown host: one retry, then the user is told the URL."""
_BACKED_OFF: frozenset[Failure] = frozenset({"rate_limited", "server_error", "connection_lost"})

T = TypeVar("T")


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    model: str,
    attempts: int,
    sleep: Callable[[float], Awaitable[None]],
    may_retry: Callable[[], bool] = lambda: True,
) -> T:
    """Await ``call()`` while it fails with a retryable error, up to ``attempts`` times
    (fewer for an unreachable server) and while ``may_retry()`` (false once a stream has
    handed on text); the last error, or the first that is not retryable, is raised as it
    is."""
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as exc:
            failure = failure_of(exc)
            allowed = _attempts_for(failure, attempts)
            if attempt >= allowed or not may_retry():
                raise
            delay_s = _retry_delay(exc, attempt)
            reason = _reason(failure, exc)
            log.warning(
                "provider_retry",
                model=model,
                attempt=attempt,
                delay_s=round(delay_s, 3),
                reason=reason,
                error=detail(exc),
            )
            await announce(
                RetryNotice(
                    model=model, reason=reason, delay_s=delay_s, attempt=attempt, attempts=allowed
                )
            )
            await sleep(delay_s)
            attempt += 1


def _attempts_for(failure: Failure, attempts: int) -> int:
    if failure in _BACKED_OFF:
        return attempts
    if failure == "unreachable":
        return min(attempts, UNREACHABLE_ATTEMPTS)
    return 1


def _reason(failure: Failure, exc: Exception) -> str:
    """The failure in a few words, as the retry line shows it."""
    status = http_status(exc)
    if failure in ("rate_limited", "server_error") and status is not None:
        return f"HTTP {status}"
    return {
        "connection_lost": "connection lost",
        "unreachable": "unreachable",
    }.get(failure, failure.replace("_", " "))


def _retry_delay(exc: Exception, attempt: int) -> float:
    """Seconds to wait before try ``attempt + 1``: Retry-After if given, else backoff."""
    retry_after = _retry_after_s(exc)
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER_S)
    return min(2.0 ** (attempt - 1), MAX_BACKOFF_S) + random.random() * BACKOFF_JITTER_S


def _retry_after_s(exc: Exception) -> float | None:
    """The provider's Retry-After (seconds or an HTTP date) as seconds from now, if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    headers = headers or getattr(exc, "litellm_response_headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return _seconds_until(value)


def _seconds_until(http_date: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
