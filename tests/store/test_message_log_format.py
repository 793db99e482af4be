"""``messages.jsonl`` is kept forever and never rewritten, so every line an earlier agentd
wrote must still load, and re-encode to the very bytes on disk.

The fixture was written by the 2026-11 code (one of every kind of message and payload its
writers make: tool calls, failed tool results, notes, reminders, a compaction summary,
stop records); regenerate it never, add a new fixture when the format grows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from shared.store.conversations import Conversation
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout

FIXTURE = Path(__file__).parent / "fixtures" / "messages-2026-11.jsonl"


def test_every_line_of_a_2026_11_log_loads_and_re_encodes_byte_for_byte() -> None:
    lines = FIXTURE.read_bytes().splitlines(keepends=True)

    messages = list(MessageLog(FIXTURE))

    assert [m.to_line() for m in messages] == lines
    assert {(m.role, m.kind) for m in messages} == {
        ("user", "message"),
        ("assistant", "message"),
        ("tool", "message"),
        ("user", "note"),
        ("user", "reminder"),
        ("user", "summary"),
        ("assistant", "stop"),
    }


def test_a_2026_11_log_replays_to_its_summary_what_it_kept_and_what_came_after(
    tmp_path: Path,
) -> None:
    chat = Conversation.create(Layout(tmp_path), "agent-fixture", memory_head=None)
    shutil.copyfile(FIXTURE, chat.log.path)
    (chat.directory / "context.json").unlink()

    reopened = Conversation.open(Layout(tmp_path), "agent-fixture", chat.id)

    window = [(m.kind, m.content) for m in reopened.context]
    assert window == [
        ("summary", "[Earlier messages: 7 replaced by this summary]\nThe user said bonjour."),
        ("reminder", "<memory_update>\nhuman.md changed\n</memory_update>"),
        ("message", "next question"),
        ("message", "Stopped at the step limit."),
    ]
    assert FIXTURE.read_bytes() == chat.log.path.read_bytes()
