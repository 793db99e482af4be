"""Real payloads for tests: a conversation log written at given times, cut and written
by the same code a reflection job uses."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from shared.reflection.payload import Limits, PayloadFile, write_payload
from shared.reflection.slices import select_slice
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.clock import FakeClock
from tests.support.transcripts import say

GENEROUS = Limits(part_chars=24_000, budget_chars=60_000)
REPLY = "好的。"


def conversation(
    home: Path, said: tuple[tuple[str, str], ...], agent_id: str = "a1"
) -> Conversation:
    """A conversation where the user said each ``(ISO time, text)`` and got ``好的。``."""
    clock = FakeClock(datetime.fromisoformat(said[0][0]) if said else None)
    chat = Conversation.create(Layout(home), agent_id, memory_head=None, clock=clock)
    for at, text in said:
        clock.now = datetime.fromisoformat(at)
        say(chat, "user", text)
        say(chat, "assistant", REPLY)
    return chat


def payload_of(tmp_path: Path, *said: tuple[str, str], limits: Limits = GENEROUS) -> PayloadFile:
    """The payload a job would write for a fresh conversation of ``said``."""
    chat = conversation(tmp_path / "home", said)
    found = select_slice(chat.log.path, None)
    assert found is not None, "nothing eligible was said"
    return write_payload(tmp_path / "payloads", "a1", [(chat.log.path, found)], limits=limits)
