"""Real models through litellm, behind the one-method ``Provider`` seam.

This module holds the provider itself: what it is configured with (model, window,
credentials, timeout, attempts) and the order of one call. The parts it calls each have
their own module, because each is a job of its own:

- :mod:`.litellm_import`: litellm costs ~5 s to import and fetches a cost map from the
  network unless told not to, so it is imported lazily (first construction) with the
  offline switches set first.
- :mod:`.litellm_wire`: the request as OpenAI chat messages, and the response back; a
  response we cannot use becomes ``ProviderMisbehaved`` instead of a half-filled answer.
- :mod:`.litellm_stream`: when the turn listens for text as it is written
  (:mod:`.streaming`), the call streams (``stream=True``, usage asked for in the last
  chunk) and the chunks are put back together into the same response.
- :mod:`.litellm_retry`: retries live there, not in litellm or the openai SDK
  (``max_retries=0`` gives exactly one HTTP hit per attempt).
- :mod:`.litellm_errors`: every litellm/openai exception crosses into agentd through
  :func:`map_litellm_errors` and leaves as a ``ProviderError`` whose message names the
  model and says what to do.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import structlog

from shared.errors import ProviderConfigError
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.credentials import ProviderKeys
from shared.providers.litellm_errors import map_litellm_errors
from shared.providers.litellm_import import import_litellm
from shared.providers.litellm_retry import call_with_retries
from shared.providers.litellm_stream import StreamAssembly
from shared.providers.litellm_wire import parse_response, to_openai_messages
from shared.providers.loopback import is_loopback
from shared.providers.streaming import TextListener, text_listener

log = structlog.get_logger(__name__)

DEFAULT_CONTEXT_WINDOW = 128_000
"""Used when neither the caller nor litellm's model map knows the model's window."""


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
        self._litellm = import_litellm()
        self.model = model
        self.api_base = api_base
        if context_window is not None:
            self.context_window = context_window
            self.context_window_source = "setting"
        else:
            known = _known_context_window(self._litellm, model)
            self.context_window = known or DEFAULT_CONTEXT_WINDOW
            self.context_window_source = "model map" if known else "default"
        self._credentials = _credentials(self._litellm, model, api_base, api_key, keys)
        """Passed on every call: litellm must not look for keys in the environment, which
        the daemon emptied of them (:mod:`shared.providers.credentials`)."""
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._block_remote = block_remote
        """Refuse any call whose api_base is not loopback (``AGENTD_BLOCK_REMOTE_MODELS``)."""
        self._sleep = sleep
        self._generated_ids = itertools.count(1)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._refuse_remote_in_tests()
        listener = text_listener()
        if listener is not None:
            return await self._stream(request, listener)
        with map_litellm_errors(self.model, self.api_base, self._timeout_s):
            kwargs = self._call_kwargs(request)
            raw = await call_with_retries(
                lambda: self._litellm.acompletion(**kwargs),
                model=self.model,
                attempts=self._attempts,
                sleep=self._sleep,
            )
        return self._parse_response(raw)

    async def _stream(self, request: ModelRequest, listener: TextListener) -> ModelResponse:
        """The call streamed: each piece of text to ``listener`` as it arrives. Retried as
        an unstreamed call is, until a piece has been handed on."""
        handed_on = False

        async def attempt() -> ModelResponse:
            nonlocal handed_on
            stream = await self._litellm.acompletion(
                **kwargs, stream=True, stream_options={"include_usage": True}
            )
            assembly = StreamAssembly(self.model, self._generated_ids)
            try:
                async for chunk in stream:
                    text = assembly.add(chunk)
                    if text:
                        handed_on = True
                        await listener(text)
            finally:  # also when cancelled: the connection goes back, the server sees it close
                await stream.aclose()
            return assembly.response()

        with map_litellm_errors(self.model, self.api_base, self._timeout_s):
            kwargs = self._call_kwargs(request)
            return await call_with_retries(
                attempt,
                model=self.model,
                attempts=self._attempts,
                sleep=self._sleep,
                may_retry=lambda: not handed_on,
            )

    def _refuse_remote_in_tests(self) -> None:
        if self._block_remote and not is_loopback(self.api_base):
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

    def _parse_response(self, raw: Any) -> ModelResponse:
        return parse_response(raw, self.model, self._generated_ids)


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


def _known_context_window(litellm: ModuleType, model: str) -> int | None:
    """The window litellm's model map gives ``model``; None (logged) when it has none."""
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
    return None
