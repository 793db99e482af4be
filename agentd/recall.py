"""The daemon's recall: one in-memory index per agent, built at start, fed by every append.

Building reads every conversation log once, in a background thread, so the daemon
answers at once and turns are never blocked by it; a search waits until its agent's
index is ready. Appends that happen while an index is being built are queued and applied
after it (those the build already read are skipped by their byte offset), so no message
is missed or counted twice.

Searches run in threads of their own: a burst of them (each waiting for its agent's
index, which one search at a time scans) must not take the threads the daemon's turns
write their files in. Nothing waits for a build in a thread. Those threads and the build's
run at background priority (:mod:`shared.priority`): a search is CPU work, and the event
loop must not wait for the CPU behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import structlog

from shared.errors import UnknownMessage
from shared.models.messages import Message
from shared.priority import lower_this_thread
from shared.recall.documents import Document, EchoTracker, read_documents, read_message_at
from shared.recall.index import AgentIndex
from shared.recall.ranking import Hit, SearchRequest
from shared.store.conversations import Conversation, scan_conversations
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

SEARCH_THREADS = 2
"""Recall's own threads: searches are CPU work, so more would only share the same cores."""
READY_POLL_S = 0.05
"""How often a search waiting for its agent's index build looks again."""

T = TypeVar("T")


class _AgentRecall:
    def __init__(self) -> None:
        self.index = AgentIndex()
        self.ready = threading.Event()
        self.read_up_to: dict[str, int] = {}
        """Per conversation, the log size the build read (appends below it are in)."""
        self.pending: list[tuple[Conversation, list[Message], list[int]]] = []


class RecallService:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._agents: dict[str, _AgentRecall] = {}
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(
            SEARCH_THREADS, thread_name_prefix="recall", initializer=lower_this_thread
        )

    def start(self, agent_ids: list[str]) -> threading.Thread:
        """Build every agent's index in one background thread."""
        states = []
        with self._lock:
            for agent_id in agent_ids:
                states.append((agent_id, self._agents.setdefault(agent_id, _AgentRecall())))
        thread = threading.Thread(
            target=self._build_all, args=(states,), name="recall-build", daemon=True
        )
        thread.start()
        return thread

    def _build_all(self, states: list[tuple[str, _AgentRecall]]) -> None:
        lower_this_thread()
        for agent_id, state in states:
            started = time.perf_counter()
            try:
                self._build(agent_id, state)
            except Exception:
                log.exception("recall_build_failed", agent_id=agent_id)
            finally:
                with self._lock:
                    pending, state.pending = state.pending, []
                    for conversation, messages, offsets in pending:
                        self._add(state, conversation, messages, offsets)
                    state.ready.set()
            _release_build_memory()
            log.info(
                "recall_index_built",
                agent_id=agent_id,
                documents=len(state.index),
                bytes=state.index.nbytes,
                seconds=round(time.perf_counter() - started, 2),
            )

    def _build(self, agent_id: str, state: _AgentRecall) -> None:
        """Index every conversation's log, including one whose ``conversation.json`` is
        damaged (the scan logs it with what to do): the log, not the record, holds the
        messages, so one bad record costs no search hits."""

        scan = scan_conversations(self.layout, agent_id)
        scan.log_damaged()

        def documents() -> Iterator[Document]:
            for conversation_id in scan.ids:
                path = self.layout.conversation_files(agent_id, conversation_id).messages
                tracker = state.index.tracker(conversation_id)
                last = -1
                for document in read_documents(path, tracker):
                    last = document.offset
                    yield document
                state.read_up_to[conversation_id] = last + 1

        state.index.build(documents())

    def on_append(
        self, conversation: Conversation, messages: list[Message], offsets: list[int]
    ) -> None:
        """A ``Conversation`` listener: index what was just appended."""
        with self._lock:
            state = self._agents.get(conversation.agent_id)
            if state is None:
                state = self._agents[conversation.agent_id] = _AgentRecall()
                state.ready.set()
            if not state.ready.is_set():
                state.pending.append((conversation, messages, offsets))
                return
            self._add(state, conversation, messages, offsets)

    @staticmethod
    def _add(
        state: _AgentRecall, conversation: Conversation, messages: list[Message], offsets: list[int]
    ) -> None:
        read = state.read_up_to.get(conversation.id, 0)
        tracker = state.index.tracker(conversation.id)
        for message, offset in zip(messages, offsets, strict=True):
            if offset < read:
                continue
            document = tracker.message(message, offset)
            if document is not None:
                state.index.add(document)

    async def _ready(self, agent_id: str) -> _AgentRecall:
        with self._lock:
            state = self._agents.get(agent_id)
            if state is None:
                state = self._agents[agent_id] = _AgentRecall()
                state.ready.set()
        while not state.ready.is_set():
            await asyncio.sleep(READY_POLL_S)
        return state

    async def _in_thread(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` in one of recall's threads (with the caller's log context)."""
        call = functools.partial(contextvars.copy_context().run, function, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def search(self, agent_id: str, request: SearchRequest) -> list[Hit]:
        state = await self._ready(agent_id)
        ranked = await self._in_thread(state.index.search, request)
        return await self._in_thread(self._hits, agent_id, state.index, ranked)

    def _hits(self, agent_id: str, index: AgentIndex, ranked: list[tuple[int, float]]) -> list[Hit]:
        hits = []
        for number, score in ranked:
            conversation_id, offset = index.locate(number)
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            document = _document_at(path, offset)
            hits.append(
                Hit(
                    message_id=index.message_id(number),
                    conversation_id=conversation_id,
                    role=index.role(number),
                    created_at=index.created_at(number),
                    score=score,
                    text=document.text if document else "",
                )
            )
        return hits

    async def around(
        self, agent_id: str, message_id: str, before: int, after: int
    ) -> list[Message]:
        """The messages around ``message_id`` in its conversation, oldest first."""
        state = await self._ready(agent_id)
        return await self._in_thread(self._around, agent_id, state.index, message_id, before, after)

    def _around(
        self, agent_id: str, index: AgentIndex, message_id: str, before: int, after: int
    ) -> list[Message]:
        """In a thread: finding the id waits for a running search of the index."""
        number = index.number_of(message_id)
        if number is not None:  # a search hit: the index knows its conversation
            conversations = [index.locate(number)[0]]
        else:  # not searchable (a summary, say): look through every conversation
            conversations = scan_conversations(self.layout, agent_id).ids
        for conversation_id in conversations:
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            messages = list(MessageLog(path))
            for position, message in enumerate(messages):
                if message.id == message_id:
                    return messages[max(0, position - before) : position + after + 1]
        raise UnknownMessage(f"no message {message_id} in this agent's conversations")

    def bind(self, agent_id: str) -> AgentRecallAccess:
        return AgentRecallAccess(self, agent_id)


class AgentRecallAccess:
    """Recall for one agent's tools (the ``Recall`` protocol of ``ToolContext``)."""

    def __init__(self, service: RecallService, agent_id: str) -> None:
        self.service = service
        self.agent_id = agent_id

    async def search(self, request: SearchRequest) -> list[Hit]:
        return await self.service.search(self.agent_id, request)

    async def around(self, message_id: str, before: int, after: int) -> list[Message]:
        return await self.service.around(self.agent_id, message_id, before, after)


def _document_at(path: Path, offset: int) -> Document | None:
    try:
        fields = read_message_at(path, offset)
    except (OSError, ValueError):
        return None
    return EchoTracker().document(fields, offset)


def _release_build_memory() -> None:
    """Hand the build's temporaries back to the OS: glibc keeps freed arenas otherwise, and
    a large build then holds ~25% more resident memory than the index needs."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
