"""The token estimate learns from the provider: four characters a token is only a guess.

Every tokenizer reads Chinese (and code, and JSON) as more tokens than ``chars ÷ 4``; a
budget that keeps that guess believes the floor is smaller than it is and compacts too
little, and then on every turn. So each call that reports usage is one sample of *provider
tokens per estimated token* for the request it answered, and later estimates are
multiplied by the learned ratio.

- Per agent and model, persisted in the agent's directory: the floor (system prompt with
  memory, tool schemas) is most of a request and belongs to the agent, the tokenizer
  belongs to the model, and the agent's language carries over to its next conversation,
  which then starts calibrated instead of relearning. A model change starts from 1.0.
- Clamped to [1, 4]: only learned upward. A provider that reports fewer tokens than the
  guess is as likely to leave cached prefixes out of its count (Ollama does) as to be
  cheaper, and a budget that trusted it would send requests over the window, which local
  engines truncate silently. 4 is a token per character, the densest real case (CJK).
- Smoothed: the first sample replaces the unfounded 1.0, then each sample moves the ratio
  a third of the way, so one odd request (a tool result of digits) does not swing it.
- A cache, not a record: an unreadable file is logged and learned again.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import structlog
from pydantic import BaseModel, Field

from shared.errors import AgentdError
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.tokens import request_tokens
from shared.store.atomic import read_model, write_model_atomic

log = structlog.get_logger(__name__)

MIN_RATIO = 1.0
MAX_RATIO = 4.0
SMOOTHING = 1 / 3
"""Weight of a new sample against the ratio learned so far."""
MIN_SAMPLE_TOKENS = 32
"""Requests estimated smaller than this say little about the ratio (rounding dominates)."""
SAVE_STEP = 0.01
"""A ratio that moved less than this since it was saved is not written again."""


class TokenRatio(BaseModel):
    ratio: float = Field(default=MIN_RATIO, ge=MIN_RATIO, le=MAX_RATIO)
    samples: int = Field(default=0, ge=0)

    def learn(self, estimated: int, reported: int) -> TokenRatio:
        """This ratio after one request estimated at ``estimated`` tokens was reported
        as ``reported`` prompt tokens by the provider."""
        observed = min(MAX_RATIO, max(MIN_RATIO, reported / estimated))
        ratio = observed if self.samples == 0 else self.ratio + SMOOTHING * (observed - self.ratio)
        return TokenRatio(ratio=round(ratio, 4), samples=self.samples + 1)


class TokenRatios(BaseModel):
    """One agent's learned ratios, by model string."""

    models: dict[str, TokenRatio] = Field(default_factory=dict)


class TokenRatioStore:
    """An agent's ratios: read once, kept in memory, written atomically when they move."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ratios = self._load()
        self._saved = {model: r.ratio for model, r in self._ratios.models.items()}
        self._write_lock = threading.Lock()

    def _load(self) -> TokenRatios:
        try:
            return read_model(self.path, TokenRatios) or TokenRatios()
        except AgentdError as exc:
            log.warning("token_ratios_unreadable", path=str(self.path), error=exc.message)
            return TokenRatios()

    def ratio(self, model: str) -> float:
        learned = self._ratios.models.get(model)
        return learned.ratio if learned else MIN_RATIO

    async def observe(self, model: str, estimated: int, reported: int) -> None:
        """Learn from one call; persist (off the event loop) when the ratio moved."""
        if estimated < MIN_SAMPLE_TOKENS or reported <= 0:
            return
        before = self._ratios.models.get(model, TokenRatio())
        after = before.learn(estimated, reported)
        self._ratios.models[model] = after
        if abs(after.ratio - self._saved.get(model, MIN_RATIO)) < SAVE_STEP and before.samples:
            return
        self._saved[model] = after.ratio
        log.info("token_ratio_learned", model=model, ratio=after.ratio, samples=after.samples)
        snapshot = self._ratios.model_copy(deep=True)
        await asyncio.to_thread(self._write, snapshot)

    def _write(self, snapshot: TokenRatios) -> None:
        with self._write_lock:
            try:
                write_model_atomic(self.path, snapshot)
            except (AgentdError, OSError) as exc:  # a cache: the turn goes on without it
                log.warning("token_ratios_not_saved", path=str(self.path), error=str(exc))


class CalibratedProvider(Provider):
    """A provider seen through one agent's learned ratio: its estimates are scaled by it,
    and each answer it gets teaches it."""

    def __init__(self, inner: Provider, ratios: TokenRatioStore) -> None:
        self.inner = inner
        self.ratios = ratios
        self.model = inner.model
        self.context_window = inner.context_window
        self.context_window_source = inner.context_window_source
        self.context_window_setting = inner.context_window_setting

    @property
    def token_ratio(self) -> float:
        return self.ratios.ratio(self.model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        usage = response.usage
        prompt_tokens = usage.context_tokens - usage.output_tokens
        await self.ratios.observe(self.model, request_tokens(request), prompt_tokens)
        return response
