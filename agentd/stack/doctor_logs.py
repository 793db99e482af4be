"""``agentd doctor``'s look at the conversation logs: lines that are not messages.

A line of ``messages.jsonl`` that does not parse as a message (damaged on disk, or written
by another program) is skipped by chat, recall and ``agentctl messages``; reflection shows
it to the reflector as it is and moves the watermark past it only once it was read
(:mod:`shared.reflection.slices`). Nothing is lost, but something wrote into the user's
transcript, so doctor names the file and the lines and says what they cost.
"""

from __future__ import annotations

from pathlib import Path

from agentd.stack.doctor_findings import Finding
from shared.reflection.slices import broken_lines
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import scan_conversations
from shared.store.layout import ConversationFiles

SHOWN_LINES = 5
"""Line numbers named per file; the count says how many there are."""


def check_conversation_logs(settings: Settings) -> Finding:
    layout = settings.layout
    logs = 0
    found: list[tuple[Path, list[int]]] = []
    for record in AgentStore(layout).scan().records:
        for conversation_id in scan_conversations(layout, record.id).ids:
            path = ConversationFiles(layout.conversation_dir(record.id, conversation_id)).messages
            logs += path.exists()
            numbers = [line.line for line in broken_lines(path)]
            if numbers:
                found.append((path, numbers))
    if not found:
        return Finding(True, "conversation logs", f"{logs} log(s), every line a message")
    named = "; ".join(f"{path} ({_lines(numbers)})" for path, numbers in found)
    path, numbers = found[0]
    return Finding(
        False,
        "conversation logs",
        f"lines that are not messages (damaged, or written by another program): {named}",
        "chat, recall and `agentctl messages` skip them; reflection shows each to the "
        "reflector as it is and moves past it only once it was read. See what wrote them "
        f"(`sed -n '{numbers[0]}p' {path}`); to clear this, stop agentd, keep a copy of "
        "the file and delete those lines",
    )


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(str(number) for number in numbers[:SHOWN_LINES])
    more = f" and {len(numbers) - SHOWN_LINES} more" if len(numbers) > SHOWN_LINES else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"
