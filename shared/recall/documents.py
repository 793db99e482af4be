"""Which messages recall can find, as what text, and which are echoes of earlier searches.

Only ordinary messages are documents: what the user said, what the agent answered (its
text, the names and arguments of the tools it called), and tool results. Summaries,
reminders, notes and stop records are made by the harness and never searchable: a
summary must not pass for something the user said. Messages are read as their JSON
fields: recall's process never imports the message models.

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

from shared.store.lines import lines_backwards

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

    def seed(self, path: Path, before: int) -> None:
        """Take up the state at byte ``before`` of the log, to read on from there: the
        searches called by the last assistant message before it (a tool result answers a
        call of the assistant message just before it, so no earlier one can be pending).
        Reads the log backwards from ``before`` only as far as that message."""
        for line in lines_backwards(path, before):
            fields = _fields(line)
            if fields is not None and (fields.get("kind", "message"), fields.get("role")) == (
                "message",
                "assistant",
            ):
                self.document(fields)
                return


def _seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def read_documents(
    path: Path, tracker: EchoTracker | None = None, start: int = 0, stop: int | None = None
) -> Iterator[Document]:
    """The documents of one conversation log whose lines start at byte ``start`` or later
    (and before ``stop``), in order, with their byte offsets. Reading from the middle, a
    new ``tracker`` is first brought to the echo state there (:meth:`EchoTracker.seed`)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below; the generator may pause)
    except FileNotFoundError:
        return
    tracker = tracker or EchoTracker()
    with handle:
        offset = 0
        if start > 0:  # the first line starting at or after ``start``
            handle.seek(start - 1)
            offset = start - 1 + len(handle.readline())
            tracker.seed(path, offset)
        for line in handle:
            begin, offset = offset, offset + len(line)
            if stop is not None and begin >= stop:
                return
            fields = _fields(line)
            if fields is not None:
                document = tracker.document(fields, begin)
                if document is not None:
                    yield document


def _fields(line: bytes) -> dict[str, Any] | None:
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if isinstance(fields, dict) and "id" in fields and "conversation_id" in fields:
        return fields
    return None


def lines_before(path: Path, offset: int, count: int) -> list[tuple[int, bytes]]:
    """Up to ``count`` complete lines ending at byte ``offset``, oldest first, each with
    its offset: read backwards in blocks, no further than needed."""
    found: list[tuple[int, bytes]] = []
    if count <= 0:
        return found
    position = offset
    for line in lines_backwards(path, offset):
        position -= len(line)
        if line.strip():
            found.append((position, line))
            if len(found) == count:
                break
    return found[::-1]


def lines_from(path: Path, offset: int, count: int) -> list[tuple[int, bytes]]:
    """Up to ``count`` non-blank lines starting at byte ``offset``, each with its offset."""
    found: list[tuple[int, bytes]] = []
    with open(path, "rb") as handle:
        handle.seek(offset)
        position = offset
        while len(found) < count:
            line = handle.readline()
            if not line:
                break
            if line.strip():
                found.append((position, line))
            position += len(line)
    return found


def read_message_at(path: Path, offset: int) -> dict[str, Any]:
    """The JSON fields of the message whose line starts at ``offset``."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return json.loads(handle.readline())
