"""The error boundary: every litellm/openai exception leaves as a ``ProviderError``.

Apart from the provider because recognising an exception is most of the work, and the
retry policy asks the same question (:func:`failure_of`): an overflow, an unusable
response or a missing key is never retried. Every message names the model and says what
to do.

Exceptions are told apart by class (:func:`_by_class`, most specific first): litellm's
own, and the openai SDK's it derives them from. ``tests/providers`` walks every exception
class litellm defines and checks where each lands, so a class a new litellm adds is
mapped on purpose. The exception chain is read by class too: litellm wraps two
client-side failures as ``InternalServerError`` (HTTP 500) although no request was ever
answered, a missing API key (the SDK's bare ``OpenAIError``) and a connection that could
not be opened (``httpx.ConnectError`` and the OS errors under it); neither is worth four
attempts, nor worth calling "HTTP 500". A class that says only a status (litellm's
``APIError``) is told by that status. Two failures litellm says only in words, raising a
bare ``Exception`` it then wraps as an HTTP error (a response it could not parse, a model
string that names no provider), are read from those words (``_LITELLM_WORDS``).

A refused request is a configuration error (``ProviderConfigError``) only when it says
so: a 404 (no such model, or no such endpoint under the api_base), litellm's own refusals
of a model string or parameter it cannot map, or a 400 whose body names an unknown model
(its ``code``, or the provider's own words for it: no class says that). Reflection pauses
for an agent on a configuration error until the user fixes it, so any other 400 or 422 —
a provider that refused one request for a reason of its own — stays an HTTP error: it is
told as it is and retried later.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Literal

from shared.errors import (
    AgentdError,
    ContextOverflowError,
    ProviderAuthError,
    ProviderConfigError,
    ProviderError,
    ProviderHTTPError,
    ProviderMisbehaved,
    ProviderTimeout,
    ProviderUnreachable,
)
from shared.providers.credentials import is_key_name
from shared.providers.litellm_import import import_litellm

MODEL_STRING_HINT = "e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5 or ollama/llama3.1"
_DETAIL_CHARS = 300

_UNKNOWN_MODEL_TEXT = re.compile(
    r"\b(unknown|invalid|unsupported|no such) model\b"
    r"|\bmodel\b[^\n]{0,120}?\b(does not exist|doesn't exist|not found|is not supported)"
    r"|does not support tools",
    re.IGNORECASE,
)
"""Providers' words for a model they do not serve (OpenAI ``The model `x` does not exist``,
Ollama ``model 'x' not found, try pulling it first``, ``… does not support tools``)."""
_UNKNOWN_MODEL_CODES = frozenset({"model_not_found", "invalid_model", "unknown_model"})
"""The ``code`` of an OpenAI-style error body that names an unknown model."""
_LITELLM_WORDS: tuple[tuple[re.Pattern[str], Failure], ...] = (
    (re.compile(r"Invalid response object|response with no 'choices'"), "misbehaved"),
    (re.compile(r"LLM Provider NOT provided|Unmapped LLM provider|isn't mapped yet"), "bad_config"),
)
"""The two failures litellm says only in words, raising a bare ``Exception`` it then wraps
as an HTTP error: a response it could not parse, a model string that names no provider."""

Failure = Literal[
    "overflow",
    "misbehaved",
    "missing_key",
    "auth",
    "unreachable",
    "rate_limited",
    "timeout",
    "connection_lost",
    "refused",
    "bad_config",
    "bad_request",
    "server_error",
    "other",
]
"""What went wrong with one call: the error mapping and the retry policy both ask."""


@contextmanager
def map_litellm_errors(
    model: str, api_base: str | None = None, timeout_s: float | None = None
) -> Iterator[None]:
    """Turn any litellm/openai exception raised inside into a ``ProviderError`` (``from`` it).

    Wrap only the litellm call: everything raised there is the provider's problem.
    ``timeout_s`` is the call's timeout, which a timeout's message names.
    """
    try:
        yield
    except AgentdError:
        raise
    except Exception as exc:
        raise _translate_error(exc, model, api_base, timeout_s) from exc


def failure_of(exc: Exception) -> Failure:
    """Classify one litellm/openai exception by its class (and its chain's classes)."""
    if _missing_key(exc):
        return "missing_key"
    if _could_not_connect(exc):
        return "unreachable"
    litellm = import_litellm()
    if isinstance(exc, litellm.exceptions.MidStreamFallbackError) and isinstance(
        exc.original_exception, Exception
    ):  # a stream broke off: what broke it is the failure
        return failure_of(exc.original_exception)
    by_class = next((found for kinds, found in _by_class() if isinstance(exc, kinds)), None)
    failure = by_class if by_class is not None else _by_status(http_status(exc))
    if failure in ("bad_request", "server_error", "other"):
        said = str(exc)
        failure = next((found for words, found in _LITELLM_WORDS if words.search(said)), failure)
    if failure == "bad_request" and _names_unknown_model(exc):
        return "bad_config"
    return failure


@cache
def _by_class() -> tuple[tuple[tuple[type[BaseException], ...], Failure], ...]:
    """What each exception class means, the more specific classes first (litellm's derive
    from the openai SDK's: a ``ContextWindowExceededError`` is a ``BadRequestError``)."""
    import openai

    x = import_litellm().exceptions
    return (
        ((x.ContextWindowExceededError,), "overflow"),
        ((openai.APIResponseValidationError,), "misbehaved"),
        ((openai.AuthenticationError, openai.PermissionDeniedError), "auth"),
        ((openai.RateLimitError,), "rate_limited"),
        ((openai.APITimeoutError,), "timeout"),
        ((openai.APIConnectionError,), "connection_lost"),
        (
            (
                x.ContentPolicyViolationError,
                x.RejectedRequestError,
                x.PaymentRequiredError,
                x.BudgetExceededError,
                x.BlockedPiiEntityError,
                x.GuardrailRaisedException,
                x.ModifyResponseException,
                x.SensitiveDataRouteException,
            ),
            "refused",
        ),
        (
            (
                openai.NotFoundError,
                x.ModelNotMappedError,
                x.LiteLLMUnknownProvider,
                x.UnsupportedParamsError,
                x.UnsupportedEndpointError,
                x.EndpointNotSupportedByModelError,
            ),
            "bad_config",
        ),
        ((openai.BadRequestError, openai.UnprocessableEntityError), "bad_request"),
        (
            (openai.InternalServerError, x.ServiceUnavailableError, x.BadGatewayError),
            "server_error",
        ),
        ((x.OpenAIError,), "other"),  # litellm's wrapper of an exception it did not map
    )


def _by_status(status: int | None) -> Failure:
    """For a class that says only its HTTP status (litellm's ``APIError``)."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limited"
    if status == 402:
        return "refused"
    if status == 404:
        return "bad_config"
    if status in (400, 422):
        return "bad_request"
    if status is not None and status >= 500:
        return "server_error"
    return "other"


def _translate_error(
    exc: Exception, model: str, api_base: str | None, timeout_s: float | None
) -> ProviderError:
    """The agentd error for one litellm/openai exception; the message names the model."""
    text = detail(exc)
    status = http_status(exc)
    failure = failure_of(exc)
    if failure == "timeout":
        waited = f"{timeout_s:g} s" if timeout_s is not None else "the timeout"
        return ProviderTimeout(
            f"{model}: the provider sent nothing for {waited} (AGENTD_PROVIDER_TIMEOUT_S) at "
            f"{endpoint(exc, api_base)}; check that the model server is working, or raise "
            "AGENTD_PROVIDER_TIMEOUT_S for a model that is slow to start answering",
            model=model,
        )
    if failure == "overflow":
        return ContextOverflowError(
            f"{model}: the request is larger than the model's context window ({text})"
        )
    if failure == "misbehaved":
        return ProviderMisbehaved(f"{model}: the provider sent a response we cannot use ({text})")
    if failure == "missing_key":
        local = (
            f"; a server of your own at {api_base} that checks no key takes any value, "
            "e.g. AGENTD_API_KEY=dummy"
            if api_base
            else ""
        )
        return ProviderAuthError(
            f"{model}: no API key is set for this provider; set {api_key_variable(model, exc)} "
            "(or AGENTD_API_KEY) in agentd's environment or its config file, then restart "
            f"agentd{local}"
        )
    if failure == "auth":
        return ProviderAuthError(
            f"{model}: the provider rejected the credentials ({text}); check "
            f"{api_key_variable(model, exc)} / the provider's API key (or AGENTD_API_KEY)"
        )
    if failure == "unreachable":
        url = endpoint(exc, api_base)
        return ProviderUnreachable(
            f"{model}: cannot reach the provider at {url} ({_connect_failure(exc)}); check "
            "that the server is running and that AGENTD_API_BASE points at it",
            url=url,
        )
    if failure == "refused":
        return ProviderHTTPError(
            f"{model}: the provider refused the request ({text})", status_code=status, model=model
        )
    if failure == "bad_config":
        return ProviderConfigError(
            f"{model}: the provider does not serve this model or endpoint ({text}); check "
            f"the model string ({MODEL_STRING_HINT}) and the api_base"
        )
    if failure == "bad_request":
        return ProviderHTTPError(
            f"{model}: the provider refused the request (HTTP {status or 400}): {text}",
            status_code=status,
            model=model,
        )
    answered = failure != "connection_lost"
    return ProviderHTTPError(
        f"{model}: the model call failed ({_failure_kind(failure, status, exc)}): {text}",
        status_code=status if answered else None,
        model=model,
    )


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _could_not_connect(exc: Exception) -> bool:
    """No connection was ever opened: refused, or a host that does not resolve. (A connect
    *timeout* stays a timeout: the host may only be slow.)"""
    import httpx

    connect_failures = (httpx.ConnectError, ConnectionRefusedError, socket.gaierror)
    return any(isinstance(link, connect_failures) for link in _chain(exc))


def _connect_failure(exc: Exception) -> str:
    if any(isinstance(link, socket.gaierror) for link in _chain(exc)):
        return "the host name does not resolve"
    if any(isinstance(link, ConnectionRefusedError) for link in _chain(exc)):
        return "connection refused"
    return "could not connect"


def endpoint(exc: Exception, api_base: str | None) -> str:
    """Where the call went: the configured api_base, else the URL of the request itself."""
    if api_base:
        return api_base
    for link in _chain(exc):
        url = getattr(getattr(link, "request", None), "url", None)
        if url is not None:
            return str(url)
    return "the provider's default address"


def _missing_key(exc: Exception) -> bool:
    """The SDK refused to send a call without a key: it raises its bare ``OpenAIError``
    (every error of a call it sent is of a subclass), which litellm wraps."""
    import openai

    return any(type(link) is openai.OpenAIError for link in _chain(exc))


def _names_unknown_model(exc: Exception) -> bool:
    """A refused request whose body names a model the provider does not serve."""
    body = getattr(exc, "body", None)
    said = body.get("message") if isinstance(body, dict) else None
    return getattr(exc, "code", None) in _UNKNOWN_MODEL_CODES or any(
        isinstance(text, str) and _UNKNOWN_MODEL_TEXT.search(text) for text in (str(exc), said)
    )


def http_status(exc: Exception) -> int | None:
    """The HTTP status the provider answered with; None when there was no answer."""
    import openai

    if not isinstance(exc, openai.APIError) or isinstance(exc, openai.APIConnectionError):
        return None
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _failure_kind(failure: Failure, status: int | None, exc: Exception) -> str:
    if failure == "connection_lost":
        return "the connection broke off; check the api_base and the network"
    if failure == "rate_limited":
        return "HTTP 429, rate limited even after retries"
    if status is not None:
        return f"HTTP {status}"
    return type(exc).__name__


def api_key_variable(model: str, exc: Exception | None = None) -> str:
    """The variable holding this model's key: the one litellm reads (``OPENAI_API_KEY`` for
    ``openai/…``, ``GEMINI_API_KEY`` for ``gemini/…``), else ``<PROVIDER>_API_KEY``."""
    litellm = import_litellm()
    try:
        named = litellm.validate_environment(model=model)["missing_keys"]
    except Exception:  # an unknown provider prefix
        named = []
    keys = [name for name in named if is_key_name(name)]
    if keys:
        return " or ".join(keys)
    provider = getattr(exc, "llm_provider", None) or (
        model.split("/", 1)[0] if "/" in model else ""
    )
    if not isinstance(provider, str) or not provider:
        return "the provider's API key variable"
    return re.sub(r"\W", "_", provider).upper() + "_API_KEY"


def detail(exc: Exception) -> str:
    """The first line of the exception's text, trimmed: enough to act on, no tracebacks."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
