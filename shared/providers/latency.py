"""Simulated model latency for the offline mock models (``AGENTD_MOCK_LATENCY_S``).

Real models take seconds; the mocks answer in microseconds. Demos and tests of what
happens while a model is thinking (a reflection killed mid-run, turns racing a
reflection) need the mocks to take their time too.
"""

from __future__ import annotations

import asyncio

from shared.providers.base import ModelRequest, ModelResponse, Provider


class WithLatency(Provider):
    def __init__(self, inner: Provider, seconds: float) -> None:
        self.inner = inner
        self.seconds = seconds
        self.model = inner.model
        self.context_window = inner.context_window

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.seconds)
        return await self.inner.complete(request)
