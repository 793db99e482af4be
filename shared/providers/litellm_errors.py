"""The error boundary: every litellm/openai exception leaves as a ``ProviderError``.

Apart from the provider because recognising an exception is most of the work (litellm
reports some failures as a type, some only as a status or a sentence), and the retry
policy asks the same question (:func:`failure_of`): an overflow, an unusable response or
a missing key is never retried. Every message names the model and says what to do.

litellm wraps two client-side failures as ``InternalServerError`` (HTTP 500) although no
request was ever answered: a missing API key, and a connection that could not be opened.
Only the exception chain tells them apart from a server's own 500, which matters twice:
neither is worth four attempts, and "HTTP 500" sends the user looking in the wrong place.

A refused request is a configuration error (``ProviderConfigError``) only when it says
so: a 404 (no such model, or no such endpoint under the api_base), litellm's own refusals
of a model string or parameter it cannot map, or a 400 whose code or text names an
unknown model. Reflection pauses for an agent on a configuration error until the user
fixes it, so any other 400 or 422 — a provider that refused one request for a reason of
its own — stays an HTTP error: it is told as it is and retried later.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
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

_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?(length|window)|too long|maximum\b.{0,80}?\btokens", re.IGNORECASE | re.DOTALL
)
_BAD_MODEL_TEXT = re.compile(
    r"LLM Provider NOT provided|Unmapped LLM provider|isn't mapped yet", re.IGNORECASE
)
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
_MISBEHAVED_TEXT = re.compile(r"Invalid response object|response with no 'choices'")
"""litellm's words for a 200 response it could not parse (it reports them as 500s)."""
_MISSING_KEY_TEXT = re.compile(
    r"missing credentials|api_key client option must be set|no key is set"
    r"|missing \w+ api key|api key (is )?(required|missing|not set)",
    re.IGNORECASE,
)
"""The SDKs' words for a call made without a key: the openai SDK raises a plain
``OpenAIError`` before sending anything, which litellm then reports as a 500."""

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
    """Classify one litellm/openai exception; the first question that matches wins."""
    import openai

    status = http_status(exc)
    if is_overflow(exc):
        return "overflow"
    if is_misbehaved(exc):
        return "misbehaved"
    if any(_MISSING_KEY_TEXT.search(str(link)) for link in _chain(exc)):
        return "missing_key"
    if _is_auth_failure(exc, status):
        return "auth"
    if _could_not_connect(exc):
        return "unreachable"
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return "rate_limited"
    if any(isinstance(link, openai.APITimeoutError) for link in _chain(exc)):
        return "timeout"
    if any(isinstance(link, openai.APIConnectionError) for link in _chain(exc)):
        return "connection_lost"
    if _is_refusal(exc, status):
        return "refused"
    if _is_bad_config(exc, status):
        return "bad_config"
    if _is_bad_request(exc, status):
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


def _is_auth_failure(exc: Exception, status: int | None) -> bool:
    import openai

    auth_errors = (openai.AuthenticationError, openai.PermissionDeniedError)
    return isinstance(exc, auth_errors) or status in (401, 403)


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


def _is_refusal(exc: Exception, status: int | None) -> bool:
    """Valid request, valid model, but the provider will not serve it (policy, billing)."""
    litellm = import_litellm()
    refusals = (
        litellm.ContentPolicyViolationError,
        litellm.exceptions.RejectedRequestError,
        litellm.PaymentRequiredError,
    )
    return isinstance(exc, refusals) or status == 402


def _is_bad_config(exc: Exception, status: int | None) -> bool:
    """The model string, a parameter or the api_base is wrong: no request will do until
    the user changes the configuration (see the module docstring)."""
    import openai

    litellm = import_litellm()
    not_served = (
        openai.NotFoundError,
        litellm.exceptions.ModelNotMappedError,
        litellm.exceptions.LiteLLMUnknownProvider,
        litellm.exceptions.UnsupportedParamsError,
        litellm.exceptions.UnsupportedEndpointError,
        litellm.exceptions.EndpointNotSupportedByModelError,
    )
    if isinstance(exc, not_served) or status == 404 or _BAD_MODEL_TEXT.search(str(exc)):
        return True
    body = getattr(exc, "body", None)
    said = body.get("message") if isinstance(body, dict) else None
    return getattr(exc, "code", None) in _UNKNOWN_MODEL_CODES or any(
        isinstance(text, str) and _UNKNOWN_MODEL_TEXT.search(text) for text in (str(exc), said)
    )


def _is_bad_request(exc: Exception, status: int | None) -> bool:
    """Any other request the provider refused as sent (400, 422)."""
    import openai

    refused = (openai.BadRequestError, openai.UnprocessableEntityError)
    return isinstance(exc, refused) or status in (400, 422)


def is_overflow(exc: Exception) -> bool:
    """The request is larger than the model's context window."""
    import openai

    litellm = import_litellm()
    if isinstance(exc, litellm.ContextWindowExceededError):
        return True
    return isinstance(exc, openai.BadRequestError) and bool(_OVERFLOW_TEXT.search(str(exc)))


def is_misbehaved(exc: Exception) -> bool:
    """The provider answered, with something that cannot be used."""
    import openai

    return isinstance(exc, openai.APIResponseValidationError) or bool(
        _MISBEHAVED_TEXT.search(str(exc))
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
