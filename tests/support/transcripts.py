"""Writing transcripts by hand in tests: one appended message at a time."""

from __future__ import annotations

from typing import Any

from shared.models.messages import Message
from shared.store.conversations import Conversation


def say(chat: Conversation, role: str, content: str = "", **fields: Any) -> Message:
    """Append one message (``role`` user, assistant or tool) and return it."""
    message = chat.new_message(role=role, content=content, **fields)
    chat.append([message])
    return message
