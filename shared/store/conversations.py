"""A conversation on disk: ``conversation.json``, ``messages.jsonl``, ``context.json`` and
``compaction-event.json``.

:class:`Conversation` is the open form a process works with: it keeps the context window
in memory, appends to the log, and replaces ``context.json`` when a turn ends or a
compaction reopens the window. Opening one reads ``context.json`` and walks the log
backwards only as far as the window's oldest message; messages the log holds past the
last listed id (a turn that had not ended, a crash) are replayed onto the window, so
nothing appended is lost: an ordinary message joins it, a compaction summary reopens it
with the ids it kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from shared.clock import Clock, utc_now
from shared.errors import CorruptStateFile, UnknownConversation
from shared.ids import ID_PATTERN, new_id
from shared.models.agents import CompactionEvent, ContextState, ConversationRecord
from shared.models.messages import AnyMessage, Message, SummaryMessage
from shared.store.atomic import read_model, write_model_atomic
from shared.store.jsonl import MessageLog
from shared.store.layout import ConversationFiles, Layout
from shared.store.trash import move_to_trash

log = structlog.get_logger(__name__)

AppendListener = Callable[["Conversation", list[Message], list[int]], None]
"""Told of every append with the messages and their byte offsets (the recall index)."""


class Conversation:
    def __init__(
        self,
        directory: Path,
        record: ConversationRecord,
        context: list[Message],
        *,
        clock: Clock = utc_now,
    ):
        self.directory = directory
        self.clock = clock
        """Stamps every message this conversation creates (tests inject a fixed one)."""
        self.record = record
        self.context = context
        """The messages in the context window, in the order the model sees them."""
        self.files = ConversationFiles(directory)
        self.log = MessageLog(self.files.messages)
        self.listeners: list[AppendListener] = []

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def agent_id(self) -> str:
        return self.record.agent_id

    @classmethod
    def create(
        cls, layout: Layout, agent_id: str, *, memory_head: str | None, clock: Clock = utc_now
    ) -> Conversation:
        record = ConversationRecord(
            id=new_id("conv"), agent_id=agent_id, memory_head_seen=memory_head, created_at=clock()
        )
        directory = layout.conversation_dir(agent_id, record.id)
        directory.mkdir(parents=True)
        conversation = cls(directory, record, [], clock=clock)
        conversation.log.path.touch(mode=0o600)
        conversation.save_context()
        conversation.save_record()
        return conversation

    @classmethod
    def open(
        cls, layout: Layout, agent_id: str, conversation_id: str, *, clock: Clock = utc_now
    ) -> Conversation:
        directory = layout.conversation_dir(agent_id, conversation_id)
        record = read_model(ConversationFiles(directory).record, ConversationRecord)
        if record is None or record.agent_id != agent_id:
            raise UnknownConversation(
                f"agent {agent_id} has no conversation {conversation_id}; "
                "list them with `agentctl conversations`"
            )
        messages_log = MessageLog(ConversationFiles(directory).messages)
        messages_log.repair_tail()
        state = read_model(ConversationFiles(directory).context, ContextState)
        context = _load_context(messages_log, state.message_ids if state else None)
        return cls(directory, record, context, clock=clock)

    def new_message(self, **fields: Any) -> AnyMessage:
        """A message of this conversation with a fresh id and timestamp (not yet appended)."""
        return Message.of(
            id=new_id("msg"),
            agent_id=self.agent_id,
            conversation_id=self.id,
            created_at=self.clock(),
            **fields,
        )

    def append(self, messages: list[Message]) -> None:
        """Persist ``messages`` (fsync'd) and add those a model sees to the window.

        If the append fails (a full disk: :class:`~shared.errors.DiskFull`) nothing of
        ``messages`` is in the log, the window or the listeners. ``context.json`` is left
        as it was: opening the conversation replays the log past the ids it lists, so it
        is replaced once a turn ends (:meth:`save_context`), not after every append (two
        or more a turn, each an fsync and a rename the whole daemon would share).
        """
        offsets = self.log.append(messages)
        self.context.extend(m for m in messages if m.sent_to_model)
        self._tell(messages, offsets)

    def compact(self, summary: Message, kept: list[Message], event: CompactionEvent) -> None:
        """Open the window with ``summary`` followed by ``kept``, then leave ``event``
        pending for the reflection trigger; the log keeps everything.

        The summary is appended (fsync'd) before the window is replaced; if the process
        dies in between, opening the conversation replays the summary onto the old window.
        """
        offsets = self.log.append([summary])
        self.context = [summary, *kept]
        self._tell([summary], offsets)
        self.save_context()
        write_model_atomic(self.files.compaction_event, event)

    def _tell(self, messages: list[Message], offsets: list[int]) -> None:
        for listener in self.listeners:
            listener(self, messages, offsets)

    def save_context(self) -> None:
        """Replace ``context.json`` with the window as it stands (and when: the idle sweep
        reads that as the conversation's last turn)."""
        state = ContextState(message_ids=[m.id for m in self.context], updated_at=self.clock())
        write_model_atomic(self.files.context, state)

    def save_record(self) -> None:
        write_model_atomic(self.files.record, self.record)


def _load_context(messages_log: MessageLog, ids: list[str] | None) -> list[Message]:
    if ids is None:
        return _replay([], list(messages_log))
    wanted = set(ids)
    found: dict[str, Message] = {}
    newer: list[Message] = []
    for message in messages_log.iter_reversed():
        if message.id in wanted:
            found[message.id] = message
            if len(found) == len(wanted):
                break
        elif not found:
            newer.append(message)
    missing = wanted - found.keys()
    if missing:
        log.warning("context_ids_missing_from_log", path=str(messages_log.path), count=len(missing))
    if newer:
        log.warning(
            "context_recovered_unlisted_messages", path=str(messages_log.path), count=len(newer)
        )
    return _replay([found[i] for i in ids if i in found], list(reversed(newer)))


def _replay(window: list[Message], messages: list[Message]) -> list[Message]:
    """The window after ``messages`` happened to it, in log order."""
    for message in messages:
        if not message.sent_to_model:
            continue
        if isinstance(message, SummaryMessage):
            keep = set(message.payload.kept_ids)
            window = [message, *(m for m in window if m.id in keep)]
        else:
            window.append(message)
    return window


@dataclass
class ConversationScan:
    """An agent's conversation directories: readable records and damaged ones."""

    ids: list[str] = field(default_factory=list)
    """Every conversation directory, damaged record or not: its log is intact and
    searchable whatever happened to ``conversation.json``."""
    records: list[ConversationRecord] = field(default_factory=list)
    damaged: list[CorruptStateFile] = field(default_factory=list)

    def log_damaged(self) -> None:
        for error in self.damaged:
            log.error("conversation_record_corrupt", path=error.path, error=error.message)


def scan_conversations(layout: Layout, agent_id: str) -> ConversationScan:
    """Every conversation of the agent; a damaged record is kept apart, so it hides
    nothing but itself."""
    scan = ConversationScan()
    directory = layout.conversations_dir(agent_id)
    if not directory.is_dir():
        return scan
    for child in sorted(directory.iterdir()):
        if not ID_PATTERN.fullmatch(child.name) or not child.is_dir():
            continue
        scan.ids.append(child.name)
        try:
            record = read_model(ConversationFiles(child).record, ConversationRecord)
        except CorruptStateFile as exc:
            scan.damaged.append(exc)
            continue
        if record is not None:
            scan.records.append(record)
    return scan


def trash_conversation(layout: Layout, agent_id: str, conversation_id: str, when: datetime) -> Path:
    """Move the conversation's directory (its log and state) to the trash; where it went."""
    directory = layout.conversation_dir(agent_id, conversation_id)
    if not directory.is_dir():
        raise UnknownConversation(
            f"agent {agent_id} has no conversation {conversation_id}; "
            "list them with `agentctl conversations`"
        )
    return move_to_trash(layout, directory, conversation_id, when)


def list_conversations(layout: Layout, agent_id: str) -> list[ConversationRecord]:
    """The readable conversation records; a damaged one is logged (its path and what to
    do) and left out."""
    scan = scan_conversations(layout, agent_id)
    scan.log_damaged()
    return scan.records
