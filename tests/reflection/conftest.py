"""A fresh conversation to write transcripts into, for the reflection state tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.store.conversations import Conversation
from shared.store.layout import Layout


@pytest.fixture
def chat(tmp_path: Path) -> Conversation:
    return Conversation.create(Layout(tmp_path), "agent-1", memory_head=None)
