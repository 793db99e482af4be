"""Retries of a model call: which failures are worth another try, how long to wait, and
the loop that waits and logs.

They live here, not in litellm or the openai SDK (the provider passes ``max_retries=0``
and never litellm's ``num_retries``, which stacks on the SDK's retries and needs
tenacity), so each attempt is exactly one HTTP request, the provider's ``Retry-After`` is
honoured (capped), every retry is logged, and tests inject a ``sleep`` that records
instead of waiting. A plain loop rather than tenacity: the wait depends on the exception
(Retry-After), so tenacity would need the same hand-written wait and logging hooks and
would save nothing but the loop.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from shared.providers.litellm_errors import detail, http_status, is_misbehaved, is_overflow

log = structlog.get_logger(__name__)

MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
BACKOFF_JITTER_S = 0.5

T = TypeVar("T")


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    model: str,
    attempts: int,
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """Await ``call()`` up to ``attempts`` times while it fails with a retryable error;
    the last error (or the first that is not retryable) is raised as it is."""
    attempt = 1
    while True:
        try:
            return await call()
        except Exception as exc:
            if attempt >= attempts or not _is_retryable(exc):
                raise
            delay_s = _retry_delay(exc, attempt)
            log.warning(
                "provider_retry",
                model=model,
                attempt=attempt,
                delay_s=round(delay_s, 3),
                error=detail(exc),
            )
            await sleep(delay_s)
            attempt += 1


def _is_retryable(exc: Exception) -> bool:
    """Rate limits, timeouts, lost connections and 5xx: worth another try."""
    import openai

    if is_overflow(exc) or is_misbehaved(exc):
        return False
    if isinstance(exc, openai.RateLimitError | openai.APIConnectionError):
        return True  # APIConnectionError includes timeouts
    status = http_status(exc)
    return status is not None and status >= 500


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
