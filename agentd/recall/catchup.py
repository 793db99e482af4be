"""The logs as recall reads them: what an opened index misses, a hit's line, the lines
around a message.

An index holds, of every conversation, a prefix of its log (messages are indexed in log
order and committed atomically, see :mod:`shared.recall.index`), so what it misses is
each log after the last message it holds. That message must still be where it was: a
log that is gone, shorter, or holds another message there (an agent restored from an
export, say) has its conversation's messages dropped from the index and read again from
the start; a conversation the index holds whose directory is gone is dropped.

An index of another format or analyzer (``format.json`` says which), or one tantivy cannot
open, is removed and made anew: :func:`opened`.

Messages are read as JSON lines (never through the message models): this module runs in
recall's process, whose start must not wait for pydantic.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from shared.errors import AmbiguousMessage, UnknownMessage
from shared.ids import ID_PATTERN
from shared.message_refs import names_message
from shared.recall.documents import Document, EchoTracker, lines_before, lines_from
from shared.recall.index import AgentIndex
from shared.recall.schema import SCHEMA_VERSION, conversation_hash
from shared.recall.text import ANALYZER_VERSION
from shared.store.layout import Layout, RecallFiles

log = structlog.get_logger(__name__)

FORMAT = {"engine": "tantivy", "schema": SCHEMA_VERSION, "analyzer": ANALYZER_VERSION}
"""What ``format.json`` says of an index this code can read."""

LOG_CHECKS = 16
"""Logs whose last indexed line is read at once when opening: after a reboot each read
waits for the disk, and a disk serves many reads at once about as fast as one."""


@dataclass
class Uncovered:
    """One conversation's log, and where the index's hold on it ends."""

    conversation_id: str
    path: Path
    start: int
    """The byte from which the log is read (the lines starting at or after it)."""
    size: int = 0
    lines: int | None = None
    """How many lines start at or after ``start`` (None while rebuilding large logs:
    not counted)."""


@dataclass
class Plan:
    work: list[Uncovered] = field(default_factory=list)
    rebuilding: str | None = None


def conversation_ids(layout: Layout, agent_id: str) -> list[str]:
    """The agent's conversations: their directories (the log, not the record, holds the
    messages: one whose ``conversation.json`` is damaged is read all the same)."""
    directory = layout.conversations_dir(agent_id)
    try:
        children = sorted(directory.iterdir())
    except FileNotFoundError:
        return []
    return [c.name for c in children if ID_PATTERN.fullmatch(c.name) and c.is_dir()]


def report_damaged_records(layout: Layout, agent_id: str, ids: list[str]) -> None:
    """Log each conversation record that is not JSON, with what to do, as the store's scan
    does (whose models are imported only then: this process starts without pydantic)."""
    for conversation_id in ids:
        try:
            json.loads(layout.conversation_files(agent_id, conversation_id).record.read_bytes())
        except FileNotFoundError:
            continue
        except ValueError:
            from shared.store.conversations import scan_conversations

            scan_conversations(layout, agent_id).log_damaged()
            return


def plan_of(layout: Layout, agent_id: str, index: AgentIndex) -> Plan:
    """What the catch-up reads, after dropping from ``index`` what the logs no longer
    hold (see the module)."""
    plan = Plan()
    ids = conversation_ids(layout, agent_id)
    report_damaged_records(layout, agent_id, ids)
    index.know(ids)
    for gone in index.conversations() - {conversation_hash(c) for c in ids}:
        index.delete_conversation(gone)
        plan.rebuilding = "conversation log changed"
    paths = [layout.conversation_files(agent_id, c).messages for c in ids]
    with ThreadPoolExecutor(LOG_CHECKS, thread_name_prefix="recall-open") as pool:
        starts = list(pool.map(lambda c, p: _start(index, c, p), ids, paths))
    for conversation_id, path, start in zip(ids, paths, starts, strict=True):
        if start is None:
            index.delete_conversation(conversation_hash(conversation_id))
            plan.rebuilding = plan.rebuilding or "conversation log changed"
            start = 0
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        plan.work.append(Uncovered(conversation_id, path, start, size))
    return plan


def _start(index: AgentIndex, conversation_id: str, path: Path) -> int | None:
    """Where reading the log resumes; None if it no longer holds what was indexed."""
    tail = index.tail(conversation_id)
    if tail is None:
        return 0
    document = read_hit(path, tail.offset)
    if document is None or (conversation_id, tail.offset) not in index.locate(document.message_id):
        return None
    return tail.offset + 1


def lines_in(path: Path, start: int) -> int:
    """How many lines start at or after byte ``start`` of the log: a line starts at 0 or
    after a newline, so it is the newlines from ``start - 1`` on (``start`` is just past
    the start of the last line indexed, whose own newline must not count)."""
    count = 0
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if start >= size:
                return 0
            count += start == 0  # the first line has no newline before it
            handle.seek(max(start - 1, 0))
            left = size - 1 - max(start - 1, 0)
            while left > 0:
                chunk = handle.read(min(1 << 20, left))
                if not chunk:
                    break
                count += chunk.count(b"\n")
                left -= len(chunk)
    except FileNotFoundError:
        return 0
    return count


def read_hit(path: Path, offset: int) -> Document | None:
    """The document whose line starts at ``offset`` of the log, if it is one."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            fields = json.loads(handle.readline())
    except (OSError, ValueError):
        return None
    if not isinstance(fields, dict) or "id" not in fields or "conversation_id" not in fields:
        return None
    return EchoTracker().document(fields, offset)


def read_around(
    layout: Layout,
    agent_id: str,
    index: AgentIndex | None,
    message_id: str,
    before: int,
    after: int,
) -> list[bytes]:
    """The lines of ``message_id`` (or its short form, its last characters) and of up to
    ``before`` messages before it and ``after`` after it, oldest first: read where the
    index says the message is, else (a message recall does not index, a summary say)
    looked for in every log."""
    found: list[tuple[str, int]] = []
    if index is not None:
        found = index.locate(message_id) or index.locate(message_id, suffix=True)
    if len(found) > 1:
        raise AmbiguousMessage(
            f"{message_id} is the end of {len(found)} message ids: give more of the id"
        )
    if found:
        conversation_id, offset = found[0]
        path = layout.conversation_files(agent_id, conversation_id).messages
        lines = _lines_around(path, offset, message_id, before, after)
        if lines is not None:
            return lines
    for conversation_id in conversation_ids(layout, agent_id):
        path = layout.conversation_files(agent_id, conversation_id).messages
        lines = _scan(path, message_id, before, after)
        if lines is not None:
            return lines
    raise UnknownMessage(f"no message {message_id} in this agent's conversations")


def _lines_around(
    path: Path, offset: int, message_id: str, before: int, after: int
) -> list[bytes] | None:
    """Reading only the lines returned; None if the line at ``offset`` is not that
    message's."""
    try:
        earlier = lines_before(path, offset, before)
        later = lines_from(path, offset, after + 1)
        first = json.loads(later[0][1]) if later else None
    except (OSError, ValueError):
        return None
    if not isinstance(first, dict) or not names_message(message_id, str(first.get("id"))):
        return None
    return [line for _, line in earlier + later]


def _scan(path: Path, message_id: str, before: int, after: int) -> list[bytes] | None:
    try:
        with open(path, "rb") as handle:
            lines = [line for line in handle if line.strip()]
    except FileNotFoundError:
        return None
    for position, line in enumerate(lines):
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and names_message(message_id, str(fields.get("id"))):
            return lines[max(0, position - before) : position + after + 1]
    return None


def opened(files: RecallFiles) -> tuple[AgentIndex, str | None]:
    """The agent's index, and why it is rebuilt (None when it is not): one of another
    format or analyzer, or that tantivy cannot open, is removed and made anew."""
    directory = files.directory
    try:
        found = json.loads(files.format.read_text())
    except FileNotFoundError:
        found = None
    except ValueError:
        found = {}
    why = None
    if found is None:
        why = "no index on disk"
    elif (found.get("engine"), found.get("schema")) != (FORMAT["engine"], FORMAT["schema"]):
        why = "format changed"
    elif found.get("analyzer") != FORMAT["analyzer"]:
        why = "analyzer changed"
    if why is None:
        try:
            return AgentIndex(directory), None
        except (OSError, ValueError) as exc:
            log.warning("recall_index_unreadable", path=str(directory), error=str(exc))
            why = "index unreadable"
    shutil.rmtree(directory, ignore_errors=True)
    index = AgentIndex(directory)
    files.format.write_text(json.dumps(FORMAT))
    return index, why
