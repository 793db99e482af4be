"""Real models through litellm, behind the one-method ``Provider`` seam.

Why it looks the way it does:

- litellm costs ~5 s to import and fetches a cost map from the network unless told not to,
  so it is imported lazily (first construction) with the offline switches set first.
- Retries live here, not in litellm or the openai SDK: ``max_retries=0`` gives exactly one
  HTTP hit per attempt, and we decide what is worth retrying, how long to wait (honouring
  ``Retry-After``) and log each retry. litellm's ``num_retries`` is never used.
- Every litellm/openai exception crosses into agentd through :func:`map_litellm_errors`
  and leaves as a ``ProviderError`` whose message names the model and says what to do.
- A response we cannot use becomes ``ProviderMisbehaved`` instead of a half-filled answer.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import itertools
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import structlog

from shared.errors import (
    AgentdError,
    ContextOverflowError,
    ProviderAuthError,
    ProviderConfigError,
    ProviderError,
    ProviderHTTPError,
    ProviderMisbehaved,
)
from shared.models.messages import Message, ToolCall, Usage
from shared.providers.base import FinishReason, ModelRequest, ModelResponse, Provider
from shared.providers.keys import ProviderKeys

log = structlog.get_logger(__name__)

DEFAULT_CONTEXT_WINDOW = 128_000
"""Used when neither the caller nor litellm's model map knows the model's window."""
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 60.0
BACKOFF_JITTER_S = 0.5
MODEL_STRING_HINT = "e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5 or ollama/llama3.1"
_DETAIL_CHARS = 300

_USER_KINDS = frozenset({"summary", "reminder", "note"})
"""Harness-made messages that the model sees as user content, whatever their role."""
_OVERFLOW_TEXT = re.compile(
    r"context[ _-]?(length|window)|too long|maximum\b.{0,80}?\btokens", re.IGNORECASE | re.DOTALL
)
_BAD_MODEL_TEXT = re.compile(
    r"LLM Provider NOT provided|Unmapped LLM provider|isn't mapped yet", re.IGNORECASE
)
_MISBEHAVED_TEXT = re.compile(r"Invalid response object|response with no 'choices'")
"""litellm's words for a 200 response it could not parse (it reports them as 500s)."""


def _import_litellm() -> ModuleType:
    """Import litellm with its network fetches off and its stdout banners silenced."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LiteLLMProvider(Provider):
    """Any litellm model string (``openai/gpt-4o``, ``ollama/llama3.1``, …) as a ``Provider``."""

    def __init__(
        self,
        *,
        model: str,
        context_window: int | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        keys: ProviderKeys | None = None,
        timeout_s: float = 120.0,
        attempts: int = 4,
        block_remote: bool = False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._litellm = _import_litellm()
        self.model = model
        self.api_base = api_base
        self.context_window = (
            context_window
            if context_window is not None
            else _known_context_window(self._litellm, model)
        )
        self._credentials = _credentials(self._litellm, model, api_base, api_key, keys)
        """Passed on every call: litellm must not look for keys in the environment, which
        the daemon emptied of them (:mod:`shared.providers.keys`)."""
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._block_remote = block_remote
        """Refuse any call whose api_base is not loopback (``AGENTD_BLOCK_REMOTE_MODELS``)."""
        self._sleep = sleep
        self._generated_ids = itertools.count(1)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._refuse_remote_in_tests()
        with map_litellm_errors(self.model):
            raw = await self._call_with_retries(self._call_kwargs(request))
        return self._parse_response(raw)

    def _refuse_remote_in_tests(self) -> None:
        if self._block_remote and not _is_loopback(self.api_base):
            raise ProviderConfigError(
                "remote model requests are disabled in tests (AGENTD_BLOCK_REMOTE_MODELS=1): "
                f"{self.model} with api_base {self.api_base!r}; point api_base at a local fake"
            )

    def _call_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request),
            "api_base": self.api_base,
            "timeout": self._timeout_s,
            "max_retries": 0,
            **self._credentials,
        }
        if request.tools:
            kwargs["tools"] = [tool.to_openai() for tool in request.tools]
        if request.max_output_tokens is not None:
            kwargs["max_tokens"] = request.max_output_tokens
        return kwargs

    async def _call_with_retries(self, kwargs: dict[str, Any]) -> Any:
        attempt = 1
        while True:
            try:
                return await self._litellm.acompletion(**kwargs)
            except Exception as exc:
                if attempt >= self._attempts or not _is_retryable(exc):
                    raise
                delay_s = _retry_delay(exc, attempt)
                log.warning(
                    "provider_retry",
                    model=self.model,
                    attempt=attempt,
                    delay_s=round(delay_s, 3),
                    error=_detail(exc),
                )
                await self._sleep(delay_s)
                attempt += 1

    def _parse_response(self, raw: Any) -> ModelResponse:
        choices = getattr(raw, "choices", None)
        if not choices:
            raise ProviderMisbehaved(f"{self.model}: the provider answered with no choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise ProviderMisbehaved(f"{self.model}: the provider's choice has no message")
        content = message.content
        if content is not None and not isinstance(content, str):
            raise ProviderMisbehaved(
                f"{self.model}: message content is a {type(content).__name__}, not text"
            )
        tool_calls = [self._parse_tool_call(call) for call in message.tool_calls or []]
        return ModelResponse(
            text=content or "",
            tool_calls=tool_calls,
            usage=_normalise_usage(getattr(raw, "usage", None)),
            finish_reason=_finish_reason(getattr(choice, "finish_reason", None), tool_calls),
            model=self.model,
        )

    def _parse_tool_call(self, call: Any) -> ToolCall:
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if not name:
            raise ProviderMisbehaved(f"{self.model}: the provider sent a tool call with no name")
        return ToolCall(
            id=getattr(call, "id", None) or f"call-{next(self._generated_ids)}",
            name=name,
            arguments=getattr(function, "arguments", None) or "{}",
        )


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request as OpenAI chat messages: the system prompt, then every sendable message."""
    converted = [{"role": "system", "content": request.system}]
    converted.extend(_to_openai_message(m) for m in request.messages if m.sent_to_model)
    return converted


def _to_openai_message(message: Message) -> dict[str, Any]:
    if message.role == "user" or message.kind in _USER_KINDS:
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    converted: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        converted["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    return converted


def _normalise_usage(raw: Any) -> Usage:
    """litellm usage → our four non-overlapping parts (``prompt_tokens`` includes the cache)."""
    if raw is None:
        return Usage()
    prompt = _count(getattr(raw, "prompt_tokens", 0))
    cache_read = _count(getattr(getattr(raw, "prompt_tokens_details", None), "cached_tokens", 0))
    cache_read = cache_read or _count(getattr(raw, "cache_read_input_tokens", 0))
    cache_write = _count(getattr(raw, "cache_creation_input_tokens", 0))
    reasoning = getattr(getattr(raw, "completion_tokens_details", None), "reasoning_tokens", 0)
    return Usage(
        input_tokens=max(0, prompt - cache_read - cache_write),
        output_tokens=_count(getattr(raw, "completion_tokens", 0)),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_tokens=_count(reasoning),
    )


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _finish_reason(reported: str | None, tool_calls: list[ToolCall]) -> FinishReason:
    if reported == "length":
        return "length"
    return "tool_calls" if tool_calls else "stop"


def _credentials(
    litellm: ModuleType,
    model: str,
    api_base: str | None,
    api_key: str | None,
    keys: ProviderKeys | None,
) -> dict[str, str | None]:
    """``api_key`` (the configured one wins) and any other credential litellm would read
    from the variables it names for ``model``, taken from ``keys``."""
    credentials: dict[str, str | None] = {"api_key": None}
    if keys is not None and keys.values:
        try:
            needed = litellm.validate_environment(model=model, api_base=api_base)["missing_keys"]
        except Exception:  # an unknown provider prefix: the call will say so
            needed = []
        credentials.update(keys.litellm_credentials(needed))
    if api_key:
        credentials["api_key"] = api_key
    return credentials


def _known_context_window(litellm: ModuleType, model: str) -> int:
    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises a bare Exception for models it has not mapped
        info = {}
    window = info.get("max_input_tokens") or info.get("max_tokens")
    if window:
        return int(window)
    log.warning(
        "context_window_unknown",
        model=model,
        default=DEFAULT_CONTEXT_WINDOW,
        hint="set AGENTD_CONTEXT_WINDOW to the model's context window in tokens",
    )
    return DEFAULT_CONTEXT_WINDOW


def _is_loopback(api_base: str | None) -> bool:
    host = urlsplit(api_base).hostname if api_base else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- retries -------------------------------------------------------------------------------


def _is_retryable(exc: Exception) -> bool:
    """Rate limits, timeouts, lost connections and 5xx: worth another try."""
    import openai

    if _is_overflow(exc) or _is_misbehaved(exc):
        return False
    if isinstance(exc, openai.RateLimitError | openai.APIConnectionError):
        return True  # APIConnectionError includes timeouts
    status = _http_status(exc)
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


# --- the error boundary --------------------------------------------------------------------


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
    detail = _detail(exc)
    status = _http_status(exc)
    if _is_overflow(exc):
        return ContextOverflowError(
            f"{model}: the request is larger than the model's context window ({detail})"
        )
    if _is_misbehaved(exc):
        return ProviderMisbehaved(f"{model}: the provider sent a response we cannot use ({detail})")
    if _is_auth_failure(exc, status):
        return ProviderAuthError(
            f"{model}: the provider rejected the credentials ({detail}); check "
            f"{_api_key_env(exc, model)} / the provider's API key (or AGENTD_API_KEY)"
        )
    if _is_refusal(exc, status):
        return ProviderHTTPError(
            f"{model}: the provider refused the request ({detail})", status_code=status, model=model
        )
    if _is_bad_request(exc, status):
        return ProviderConfigError(
            f"{model}: the provider does not accept this model or request ({detail}); check "
            f"the model string ({MODEL_STRING_HINT}) and the api_base"
        )
    return ProviderHTTPError(
        f"{model}: the model call failed ({_failure_kind(exc, status)}): {detail}",
        status_code=status,
        model=model,
    )


def _is_auth_failure(exc: Exception, status: int | None) -> bool:
    import openai

    auth_errors = (openai.AuthenticationError, openai.PermissionDeniedError)
    return isinstance(exc, auth_errors) or status in (401, 403)


def _is_refusal(exc: Exception, status: int | None) -> bool:
    """Valid request, valid model, but the provider will not serve it (policy, billing)."""
    litellm = _import_litellm()
    refusals = (
        litellm.ContentPolicyViolationError,
        litellm.exceptions.RejectedRequestError,
        litellm.PaymentRequiredError,
    )
    return isinstance(exc, refusals) or status == 402


def _is_bad_request(exc: Exception, status: int | None) -> bool:
    """A request the provider will never accept as sent: usually a wrong model string."""
    import openai

    litellm = _import_litellm()
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


def _is_overflow(exc: Exception) -> bool:
    import openai

    litellm = _import_litellm()
    if isinstance(exc, litellm.ContextWindowExceededError):
        return True
    return isinstance(exc, openai.BadRequestError) and bool(_OVERFLOW_TEXT.search(str(exc)))


def _is_misbehaved(exc: Exception) -> bool:
    import openai

    return isinstance(exc, openai.APIResponseValidationError) or bool(
        _MISBEHAVED_TEXT.search(str(exc))
    )


def _http_status(exc: Exception) -> int | None:
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


def _detail(exc: Exception) -> str:
    """The first line of the exception's text, trimmed: enough to act on, no tracebacks."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
