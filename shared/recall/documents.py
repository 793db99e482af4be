"""Which messages recall can find, as what text, and which are echoes of earlier searches.

Only ordinary messages are documents: what the user said, what the agent answered (its
text, the names and arguments of the tools it called), and tool results. Summaries,
reminders, notes and stop records are made by the harness and never searchable: a
summary must not pass for something the user said.

An *echo* is a trace a search leaves: the assistant message that called a recall tool,
and that call's result. Echoes still match, but score ×0.1 and stay out of the corpus
statistics, or every search would be won by the previous search for the same words.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.models.messages import Message

RECALL_TOOLS = frozenset({"recall_search", "messages_around"})
SEARCHABLE_ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class Document:
    message_id: str
    conversation_id: str
    role: str
    created_at: float
    """POSIX seconds (UTC); what date filters and tie-breaks compare."""
    text: str
    echo: bool
    offset: int = -1
    """Byte offset of the message's line in its conversation's ``messages.jsonl``."""


class EchoTracker:
    """Follows one conversation in log order, remembering which tool calls were searches."""

    def __init__(self) -> None:
        self._search_calls: set[str] = set()

    def document(self, fields: dict[str, Any], offset: int = -1) -> Document | None:
        """The document for one message (as its JSON fields), or None if not searchable."""
        if fields.get("kind", "message") != "message":
            return None
        role = fields.get("role")
        if role not in SEARCHABLE_ROLES:
            return None
        content = fields.get("content") or ""
        echo = False
        if role == "assistant":
            parts = [content] if content else []
            for call in fields.get("tool_calls") or []:
                name = call.get("name", "")
                if name in RECALL_TOOLS:
                    self._search_calls.add(call.get("id", ""))
                    echo = True
                parts += [name, call.get("arguments") or "{}"]
            text = "\n".join(parts)
        else:
            text = content
            echo = role == "tool" and fields.get("tool_call_id") in self._search_calls
        if not text:
            return None
        return Document(
            message_id=fields["id"],
            conversation_id=fields["conversation_id"],
            role=role,
            created_at=_seconds(fields.get("created_at")),
            text=text,
            echo=echo,
            offset=offset,
        )

    def message(self, message: Message, offset: int = -1) -> Document | None:
        return self.document(message.model_dump(mode="json"), offset)


def _seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def read_documents(path: Path, tracker: EchoTracker | None = None) -> Iterator[Document]:
    """Every document of one conversation log, in order, with its byte offset."""
    if not path.exists():
        return
    tracker = tracker or EchoTracker()
    with open(path, "rb") as handle:
        offset = 0
        for line in handle:
            start, offset = offset, offset + len(line)
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if isinstance(fields, dict) and "id" in fields and "conversation_id" in fields:
                document = tracker.document(fields, start)
                if document is not None:
                    yield document


def read_message_at(path: Path, offset: int) -> dict[str, Any]:
    """The JSON fields of the message whose line starts at ``offset``."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return json.loads(handle.readline())
