"""The error boundary: every litellm/openai exception leaves as a ``ProviderError``.

Apart from the provider because recognising an exception is most of the work (litellm
reports some failures as a type, some only as a status or a sentence), and the retry
policy asks the same questions (an overflow or an unusable response is never retried).
Every message names the model and says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from shared.errors import (
    AgentdError,
    ContextOverflowError,
    ProviderAuthError,
    ProviderConfigError,
    ProviderError,
    ProviderHTTPError,
    ProviderMisbehaved,
)
from shared.providers.litellm_import import import_litellm

MODEL_STRING_HINT = "e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5 or ollama/llama3.1"
_DETAIL_CHARS = 300

_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?(length|window)|too long|maximum\b.{0,80}?\btokens", re.IGNORECASE | re.DOTALL
)
_BAD_MODEL_TEXT = re.compile(
    r"LLM Provider NOT provided|Unmapped LLM provider|isn't mapped yet", re.IGNORECASE
)
_MISBEHAVED_TEXT = re.compile(r"Invalid response object|response with no 'choices'")
"""litellm's words for a 200 response it could not parse (it reports them as 500s)."""


@contextmanager
def map_litellm_errors(model: str) -> Iterator[None]:
    """Turn any litellm/openai exception raised inside into a ``ProviderError`` (``from`` it).

    Wrap only the litellm call: everything raised there is the provider's problem.
    """
    try:
        yield
    except AgentdError:
        raise
    except Exception as exc:
        raise _translate_error(exc, model) from exc


def _translate_error(exc: Exception, model: str) -> ProviderError:
    """The agentd error for one litellm/openai exception; the message names the model."""
    text = detail(exc)
    status = http_status(exc)
    if is_overflow(exc):
        return ContextOverflowError(
            f"{model}: the request is larger than the model's context window ({text})"
        )
    if is_misbehaved(exc):
        return ProviderMisbehaved(f"{model}: the provider sent a response we cannot use ({text})")
    if _is_auth_failure(exc, status):
        return ProviderAuthError(
            f"{model}: the provider rejected the credentials ({text}); check "
            f"{_api_key_env(exc, model)} / the provider's API key (or AGENTD_API_KEY)"
        )
    if _is_refusal(exc, status):
        return ProviderHTTPError(
            f"{model}: the provider refused the request ({text})", status_code=status, model=model
        )
    if _is_bad_request(exc, status):
        return ProviderConfigError(
            f"{model}: the provider does not accept this model or request ({text}); check "
            f"the model string ({MODEL_STRING_HINT}) and the api_base"
        )
    return ProviderHTTPError(
        f"{model}: the model call failed ({_failure_kind(exc, status)}): {text}",
        status_code=status,
        model=model,
    )


def _is_auth_failure(exc: Exception, status: int | None) -> bool:
    import openai

    auth_errors = (openai.AuthenticationError, openai.PermissionDeniedError)
    return isinstance(exc, auth_errors) or status in (401, 403)


def _is_refusal(exc: Exception, status: int | None) -> bool:
    """Valid request, valid model, but the provider will not serve it (policy, billing)."""
    litellm = import_litellm()
    refusals = (
        litellm.ContentPolicyViolationError,
        litellm.exceptions.RejectedRequestError,
        litellm.PaymentRequiredError,
    )
    return isinstance(exc, refusals) or status == 402


def _is_bad_request(exc: Exception, status: int | None) -> bool:
    """A request the provider will never accept as sent: usually a wrong model string."""
    import openai

    litellm = import_litellm()
    bad_requests = (
        openai.BadRequestError,
        openai.NotFoundError,
        openai.UnprocessableEntityError,
        litellm.ModelNotMappedError,
    )
    return (
        isinstance(exc, bad_requests)
        or status in (400, 404, 422)
        or bool(_BAD_MODEL_TEXT.search(str(exc)))
    )


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


def _failure_kind(exc: Exception, status: int | None) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timed out; raise AGENTD_PROVIDER_TIMEOUT_S or check the server"
    if isinstance(exc, openai.APIConnectionError):
        return "could not reach the provider; check the api_base and the network"
    if status == 429:
        return "HTTP 429, rate limited even after retries"
    if status is not None:
        return f"HTTP {status}"
    return type(exc).__name__


def _api_key_env(exc: Exception, model: str) -> str:
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
