"""Provider test fixtures: one fake OpenAI server per session, and no remote model calls."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.openai_server import FakeOpenAIServer

# Tests may import litellm directly (e.g. to walk its exceptions); keep that import offline too.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


@pytest.fixture(scope="session")
def openai_server() -> Iterator[FakeOpenAIServer]:
    """A local OpenAI-compatible server shared by the session; reset before each test."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _block_remote_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_BLOCK_REMOTE_MODELS", "1")


@pytest.fixture(autouse=True)
def _fresh_openai_server(request: pytest.FixtureRequest) -> None:
    """Give each test that uses ``openai_server`` an empty queue and request log."""
    if "openai_server" in request.fixturenames:
        request.getfixturevalue("openai_server").reset()
