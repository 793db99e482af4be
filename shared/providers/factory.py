"""Which provider a model string gets, built once per (model, window) and reused.

``mock`` is the offline deterministic model; anything else is a litellm model string
(``openai/gpt-4o``, ``anthropic/claude-sonnet-4-5``, ``ollama/llama3.1``, …). litellm is
imported here lazily, the first time a non-mock model is asked for: it costs ~5 s and
~200 MB, which a mock-only daemon never pays.
"""

from __future__ import annotations

import asyncio

from shared.providers.base import AGENT_WINDOW_SETTING, GLOBAL_WINDOW_SETTING, Provider
from shared.providers.credentials import ProviderKeys
from shared.providers.latency import WithLatency
from shared.providers.mock import DEFAULT_MOCK_CONTEXT_WINDOW, MOCK_MODEL, MockProvider
from shared.settings import Settings


class ProviderFactory:
    def __init__(self, settings: Settings, keys: ProviderKeys | None = None) -> None:
        self.settings = settings
        self.keys = keys
        """Provider keys taken from the environment at start (``take_provider_keys``);
        without them litellm reads its variables from the environment itself."""
        self._providers: dict[tuple[str, int | None, str | None], Provider] = {}

    def get(self, model: str | None = None, context_window: int | None = None) -> Provider:
        """The provider for ``model`` (default: the configured one); ``context_window``
        (an agent's override) wins over ``AGENTD_CONTEXT_WINDOW``."""
        key = self._key(model, context_window)
        if key not in self._providers:
            model, window, setting = key
            provider = self._make(model, window)
            if setting is not None:
                provider.context_window_source = "setting"
                provider.context_window_setting = setting
            self._providers[key] = provider
        return self._providers[key]

    async def get_off_loop(
        self, model: str | None = None, context_window: int | None = None
    ) -> Provider:
        """:meth:`get` for async code: a provider not built yet is built in a thread, so
        the first turn on a litellm model (a ~5 s import) never stalls the event loop."""
        key = self._key(model, context_window)
        if key in self._providers:
            return self._providers[key]
        return await asyncio.to_thread(self.get, model, context_window)

    def _key(
        self, model: str | None, context_window: int | None
    ) -> tuple[str, int | None, str | None]:
        """(model, window, the setting the window comes from): two settings with the same
        number still answer ``agentctl context`` differently."""
        model = model or self.settings.model
        if context_window:
            return (model, context_window, AGENT_WINDOW_SETTING)
        if self.settings.context_window:
            return (model, self.settings.context_window, GLOBAL_WINDOW_SETTING)
        return (model, None, None)

    def _make(self, model: str, window: int | None) -> Provider:
        if model == MOCK_MODEL:
            mock = MockProvider(context_window=window or DEFAULT_MOCK_CONTEXT_WINDOW)
            latency = self.settings.mock_latency_s
            return WithLatency(mock, latency) if latency else mock
        from shared.providers.litellm_provider import LiteLLMProvider

        return LiteLLMProvider(
            model=model,
            context_window=window,
            api_base=self.settings.api_base,
            api_key=self.settings.api_key,
            keys=self.keys,
            timeout_s=self.settings.provider_timeout_s,
            attempts=self.settings.provider_attempts,
            block_remote=self.settings.block_remote_models,
        )
