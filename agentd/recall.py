"""The daemon's recall: one index per agent, opened from disk at start, fed by every append.

At start a background thread opens each agent's persisted segments
(:mod:`shared.recall.persisted`: mapped, not read) and a search of that agent is answered
from then on; then it reads from the logs what the segments do not cover (the tail
written since the last segment was frozen, and whatever an unusable segment held), which
is what status calls *catching up* or *rebuilding*. Appends that happen meanwhile are
queued and applied after it (those it already read are skipped by their byte offset), so
no message is missed or counted twice. Last, each segment's checksum is verified; a
damaged one is dropped and the agent reopened, which reads its documents again.

Every segment the index freezes is written to disk by one writer thread, which also
merges them; a merge is swapped in when done, so appends and searches never wait for it.

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
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog
from pydantic import ValidationError

from agentd.recall_access import AgentRecallAccess
from agentd.recall_frames import WRITE_AT_STOP_S
from shared.errors import AmbiguousMessage, UnknownMessage
from shared.models.messages import Message
from shared.priority import lower_this_thread
from shared.protocol import names_message
from shared.recall.documents import (
    Document,
    EchoTracker,
    lines_before,
    lines_from,
    read_documents,
    read_message_at,
)
from shared.recall.index import AgentIndex
from shared.recall.persisted import Covered, PersistedIndex
from shared.recall.ranking import Found, Hit, SearchRequest
from shared.recall.segments import OPEN_SEGMENT_DOCS, SEGMENT_CAPACITY, Segment
from shared.recall.text import ANALYZER_VERSION
from shared.store.conversations import Conversation, scan_conversations
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

SEARCH_THREADS = 2
"""Recall's own threads: searches are CPU work, so more would only share the same cores."""
READY_POLL_S = 0.005
"""How often a search waiting for its agent's index to open looks again (an open takes
a tenth of a second at a million messages: a coarser poll would add half of that)."""
READ_AT_OPEN = 256
"""Lines missing from the persisted segments that opening reads at once (a few ms)
rather than in the background: what an orderly stop leaves (lines that are not
messages to index, a summary or a stop record) or a short tail."""
COUNT_AT_OPEN_BYTES = 1 << 20
"""Logs this small are counted even when the index is rebuilt from nothing (a millisecond
of reading), so a small agent just imported or restored is read at open and its first
search finds everything, while a large one rebuilds in the background."""

T = TypeVar("T")


class _AgentRecall:
    def __init__(self, persisted: PersistedIndex, index: AgentIndex) -> None:
        self.persisted = persisted
        self.index = index
        self.searchable = threading.Event()
        """Set once the persisted segments are open and what they miss is counted:
        searches are answered from then on."""
        self.ready = threading.Event()
        """Set once everything the logs hold is indexed (appends then go in at once)."""
        self.read_up_to: dict[str, int] = {}
        """Per conversation, past the last line the catch-up read (appends below it are in)."""
        self.pending: list[tuple[str, list[Message], list[int]]] = []
        self.rebuilding: str | None = None
        self.work: list[_Uncovered] = []
        """What the catch-up reads, per conversation."""
        self.to_read: int | None = None
        """Lines the catch-up has still to read (counted before searches are answered,
        then counted down); None while rebuilding large logs (not counted)."""

    def state(self) -> str:
        if self.ready.is_set():
            return "ready"
        if not self.searchable.is_set():
            return "opening"
        if self.rebuilding is not None:
            return f"rebuilding: {self.rebuilding}"
        missing = self._missing()
        return "ready" if missing == 0 else f"catching up {missing} messages"

    def incomplete(self) -> str | None:
        """What a search answered now may miss (see :attr:`Found.incomplete`), or None."""
        if self.ready.is_set():
            return None
        if self.rebuilding is not None:
            return f"index rebuilding ({self.rebuilding}): results may be incomplete"
        missing = self._missing()
        if missing == 0:  # every line read is indexed, and nothing was appended meanwhile
            return None
        return f"index catching up: {missing:,} messages not searchable yet"

    def _missing(self) -> int:
        """Lines the catch-up has still to index, and messages appended meanwhile (which
        join the index when it is done)."""
        return (self.to_read or 0) + sum(len(messages) for _, messages, _ in self.pending)


@dataclass
class _Uncovered:
    """One conversation's log and what of it the persisted segments do not cover."""

    conversation_id: str
    path: Path
    ranges: list[tuple[int, int | None]]
    """Line offsets [start, stop) to read; the last one open-ended (the tail)."""
    lines: list[int] | None = None
    """How many lines start in each range (None while rebuilding large logs: not counted)."""


class RecallService:
    def __init__(
        self,
        layout: Layout,
        *,
        open_segment_docs: int = OPEN_SEGMENT_DOCS,
        segment_capacity: int = SEGMENT_CAPACITY,
    ) -> None:
        """The sizes are parameters only so tests can exercise freezing and merging."""
        self.layout = layout
        self._sizes = {"open_segment_docs": open_segment_docs, "segment_capacity": segment_capacity}
        self._agents: dict[str, _AgentRecall] = {}
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(
            SEARCH_THREADS, thread_name_prefix="recall", initializer=lower_this_thread
        )
        self._manifest_locks: dict[str, threading.Lock] = {}
        self._writes: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._write_segments, name="recall-write", daemon=True).start()

    def _new_state(self, agent_id: str) -> _AgentRecall:
        """A fresh index for the agent (the caller holds ``_lock``), writing what it freezes."""
        persisted = PersistedIndex(
            self.layout.recall_files(agent_id),
            lambda conversation_id: (
                self.layout.conversation_files(agent_id, conversation_id).messages
            ),
            ANALYZER_VERSION,
            self._manifest_locks.setdefault(agent_id, threading.Lock()),
            capacity=self._sizes["segment_capacity"],
        )

        def on_freeze(segment: Segment) -> None:
            self._writes.put(functools.partial(persisted.persist, index, segment))

        index = AgentIndex(on_freeze=on_freeze, **self._sizes)
        return _AgentRecall(persisted, index)

    def wait_for_writes(self, timeout_s: float | None = None) -> bool:
        """Return once the segments frozen so far are written (and merged), or after
        ``timeout_s``; False if they were not all written by then."""
        done = threading.Event()
        self._writes.put(done.set)
        return done.wait(timeout_s)

    def write_open_segments(self, timeout_s: float = WRITE_AT_STOP_S) -> bool:
        """At an orderly stop: freeze and write every caught-up agent's open segment (up to
        8,191 documents each), so the next start reads no tail from the logs. Waits at most
        ``timeout_s`` for the writes (and the merges they complete) and returns whether
        they all finished; what is cut short is read again at the next start, as after a
        kill. An agent still catching up is skipped: its build has not finished either."""
        started = time.perf_counter()
        with self._lock:
            states = [state for state in self._agents.values() if state.ready.is_set()]
        for state in states:
            state.index.freeze()
        written = self.wait_for_writes(timeout_s)
        log.info(
            "recall_open_segments_written" if written else "recall_open_segments_cut_short",
            agents=len(states),
            seconds=round(time.perf_counter() - started, 2),
        )
        return written

    def _write_segments(self) -> None:
        """The writer thread: segments to disk and merges, one at a time, in order."""
        lower_this_thread()
        while True:
            job = self._writes.get()
            try:
                job()
            except Exception:
                log.exception("recall_write_failed")

    def start(self, agent_ids: list[str]) -> threading.Thread:
        """Open every agent's index in one background thread, then catch up on the logs."""
        states = []
        for agent_id in agent_ids:
            self.drop(agent_id)  # an index already open is opened again, not added to
            with self._lock:
                states.append(
                    (agent_id, self._agents.setdefault(agent_id, self._new_state(agent_id)))
                )
        thread = threading.Thread(
            target=self._build_all, args=(states,), name="recall-build", daemon=True
        )
        thread.start()
        return thread

    def drop(self, agent_id: str) -> None:
        """Forget the agent's index: it was deleted, or lost a conversation and is opened
        again with :meth:`start`. A build still running fills a state nobody reads, and
        its segments are no longer written."""
        with self._lock:
            state = self._agents.pop(agent_id, None)
        if state is not None:
            state.persisted.closed = True
            state.searchable.set()

    def _build_all(self, states: list[tuple[str, _AgentRecall]]) -> None:
        for agent_id, state in states:  # at the daemon's priority: searches wait for this
            self._open(agent_id, state)
        lower_this_thread()  # the catch-up is background work
        for agent_id, state in states:
            if state.ready.is_set():  # nothing to read
                continue
            started = time.perf_counter()
            try:
                self._catch_up(state)
            except Exception:
                log.exception("recall_build_failed", agent_id=agent_id)
            finally:
                self._finish(state)
            _release_build_memory()
            log.info(
                "recall_index_built",
                agent_id=agent_id,
                documents=len(state.index),
                bytes=state.index.nbytes,
                seconds=round(time.perf_counter() - started, 2),
            )
        for agent_id, state in states:
            damaged = state.persisted.damaged()
            if damaged and not state.persisted.closed:
                log.warning("recall_segments_damaged", agent_id=agent_id, serials=damaged)
                state.persisted.forget(damaged)
                self.start([agent_id]).join()

    def _open(self, agent_id: str, state: _AgentRecall) -> None:
        """Open the persisted segments and count what they miss; searches are answered
        from then on. With nothing missing the index is ready at once, and with a few
        lines missing (a stop's last messages) it reads them here: a start over what was
        persisted never says "catching up", not even for a moment."""
        started = time.perf_counter()
        covered: Covered = {}
        try:
            loaded = state.persisted.load()
            state.index.restore(loaded.conversations, loaded.parts)
            state.rebuilding = loaded.rebuilding
            covered = loaded.covered
        except Exception:
            log.exception("recall_open_failed", agent_id=agent_id)
            state.rebuilding = "index unreadable"
        try:
            self._plan(agent_id, state, covered)
            if state.to_read is not None and state.to_read <= READ_AT_OPEN:
                try:
                    self._catch_up(state)
                finally:
                    self._finish(state)
        except Exception:
            log.exception("recall_build_failed", agent_id=agent_id)
        finally:
            state.searchable.set()
        log.info(
            "recall_index_opened",
            agent_id=agent_id,
            documents=len(state.index),
            rebuilding=state.rebuilding,
            to_read=state.to_read,
            seconds=round(time.perf_counter() - started, 3),
        )

    def _plan(self, agent_id: str, state: _AgentRecall, covered: Covered) -> None:
        """What the catch-up reads: what the persisted segments do not cover, in every
        conversation's log, including one whose ``conversation.json`` is damaged (the scan
        logs it with what to do): the log, not the record, holds the messages. Counted
        unless rebuilding large logs (then it may be every log: status says why instead)."""
        scan = scan_conversations(self.layout, agent_id)
        scan.log_damaged()
        for conversation_id in scan.ids:
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            runs = covered.get(conversation_id, [])
            state.work.append(_Uncovered(conversation_id, path, _uncovered(runs)))
            state.read_up_to[conversation_id] = runs[-1][1] + 1 if runs else 0
        if state.rebuilding is None or _total_bytes(state.work) <= COUNT_AT_OPEN_BYTES:
            for item in state.work:
                item.lines = _lines_in(item.path, item.ranges)
            state.to_read = sum(sum(item.lines or ()) for item in state.work)

    def _catch_up(self, state: _AgentRecall) -> None:
        """Index what :meth:`_plan` found uncovered, counting :attr:`_AgentRecall.to_read`
        down as it goes (a range counted empty is not read)."""

        def documents() -> Iterator[Document]:
            for item in state.work:
                for n, (start, stop) in enumerate(item.ranges):
                    left = None if item.lines is None else item.lines[n]
                    if left == 0:
                        continue
                    tail = stop is None
                    tracker = state.index.tracker(item.conversation_id) if tail else EchoTracker()
                    for document in read_documents(item.path, tracker, start, stop):
                        if tail:
                            state.read_up_to[item.conversation_id] = document.offset + 1
                        yield document
                        if left:  # indexed: the build asks for the next one only then
                            left -= 1
                            state.to_read = max(0, (state.to_read or 0) - 1)
                    if left:  # lines that were not documents (a summary, a stop record)
                        state.to_read = max(0, (state.to_read or 0) - left)

        state.index.build(documents())
        if any(
            stop is not None and (item.lines is None or item.lines[n])
            for item in state.work
            for n, (_, stop) in enumerate(item.ranges)
        ):
            state.index.relink()

    def _finish(self, state: _AgentRecall) -> None:
        """The catch-up is done: what was appended meanwhile joins, then appends go in at
        once."""
        with self._lock:
            pending, state.pending = state.pending, []
            for conversation_id, messages, offsets in pending:
                self._add(state, conversation_id, messages, offsets)
            state.ready.set()

    def on_append(
        self, conversation: Conversation, messages: list[Message], offsets: list[int]
    ) -> None:
        """A ``Conversation`` listener: index what was just appended."""
        self.appended(conversation.agent_id, conversation.id, messages, offsets)

    def appended(
        self, agent_id: str, conversation_id: str, messages: list[Message], offsets: list[int]
    ) -> None:
        """Index ``messages``, just appended to the conversation's log at ``offsets``."""
        with self._lock:
            state = self._agents.get(agent_id)
            if state is None:  # an agent created since the start: nothing to open
                state = self._agents[agent_id] = self._new_state(agent_id)
                state.searchable.set()
                state.ready.set()
            if not state.ready.is_set():
                state.pending.append((conversation_id, messages, offsets))
                return
            self._add(state, conversation_id, messages, offsets)

    @staticmethod
    def _add(
        state: _AgentRecall, conversation_id: str, messages: list[Message], offsets: list[int]
    ) -> None:
        read = state.read_up_to.get(conversation_id, 0)
        tracker = state.index.tracker(conversation_id)
        for message, offset in zip(messages, offsets, strict=True):
            if offset < read:
                continue
            document = tracker.message(message, offset)
            if document is not None:
                state.index.add(document)

    async def _ready(self, agent_id: str) -> _AgentRecall:
        """The agent's index once its persisted segments are open (not necessarily caught up)."""
        with self._lock:
            state = self._agents.get(agent_id)
            if state is None:
                state = self._agents[agent_id] = self._new_state(agent_id)
                state.searchable.set()
                state.ready.set()
        while not state.searchable.is_set():
            await asyncio.sleep(READY_POLL_S)
        return state

    def status(self, agent_id: str) -> dict[str, object]:
        """The index's state (``ready``, ``catching up N messages``, ``rebuilding: why``)
        and the bytes its files take."""
        with self._lock:
            state = self._agents.get(agent_id)
        if state is None:
            return {"state": "not open", "bytes_on_disk": None}
        return {"state": state.state(), "bytes_on_disk": state.persisted.bytes_on_disk}

    async def _in_thread(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` in one of recall's threads (with the caller's log context)."""
        call = functools.partial(contextvars.copy_context().run, function, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def search(self, agent_id: str, request: SearchRequest) -> Found:
        """The hits, and what they may miss: asked before the search, so a search that
        began while the index was catching up says so even if it ended after."""
        state = await self._ready(agent_id)
        incomplete = state.incomplete()
        ranked = await self._in_thread(state.index.search, request)
        hits = await self._in_thread(self._hits, agent_id, state.index, ranked)
        return Found(hits, incomplete)

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
        """In a thread: finding the id waits for a running search of the index.
        ``message_id`` may be short (its last characters, as agentctl shows it)."""
        number = index.number_of(message_id)
        numbers = [number] if number is not None else index.numbers_ending(message_id)
        if len(numbers) > 1:
            raise AmbiguousMessage(
                f"{message_id} is the end of {len(numbers)} message ids: give more of the id"
            )
        if numbers:  # a search hit: its line is where the index says
            conversation_id, offset = index.locate(numbers[0])
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            found = _lines_around(path, offset, message_id, before, after)
            if found is not None:
                return found
        # not searchable (a summary, say): look through every conversation
        for conversation_id in scan_conversations(self.layout, agent_id).ids:
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            messages = list(MessageLog(path))
            for position, message in enumerate(messages):
                if names_message(message_id, message.id):
                    return messages[max(0, position - before) : position + after + 1]
        raise UnknownMessage(f"no message {message_id} in this agent's conversations")

    def bind(self, agent_id: str) -> AgentRecallAccess:
        return AgentRecallAccess(self, agent_id)


def _lines_around(
    path: Path, offset: int, message_id: str, before: int, after: int
) -> list[Message] | None:
    """``message_id``, whose line starts at ``offset``, with up to ``before`` messages
    before it and ``after`` after it, reading only their lines; None if the line there is
    not that message's (or a line around it does not parse: then the caller scans)."""
    try:
        earlier = lines_before(path, offset, before)
        later = lines_from(path, offset, after + 1)
    except OSError:
        return None
    try:
        messages = [Message.parse_line(line) for _, line in earlier + later]
    except ValidationError:
        return None
    if not later or not names_message(message_id, messages[len(earlier)].id):
        return None
    return messages


def _uncovered(runs: list[tuple[int, int]]) -> list[tuple[int, int | None]]:
    """The ranges of line offsets [start, stop) the runs leave (the last one open-ended)."""
    ranges: list[tuple[int, int | None]] = []
    start = 0
    for first, last in runs:
        if first > start:
            ranges.append((start, first))
        start = max(start, last + 1)
    ranges.append((start, None))
    return ranges


def _total_bytes(work: list[_Uncovered]) -> int:
    """The size of every log in ``work`` (a log gone since the scan counts nothing)."""
    total = 0
    for item in work:
        with contextlib.suppress(FileNotFoundError):
            total += item.path.stat().st_size
    return total


def _lines_in(path: Path, ranges: list[tuple[int, int | None]]) -> list[int]:
    """How many lines start in each of ``ranges`` of the log: a line starts at 0 or after
    a newline, so it is the newlines in the range moved back one byte. A range starts just
    past the start of the last line indexed, whose newline must not count (it would make
    every conversation of a caught-up index look one message behind)."""
    counts = [0] * len(ranges)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            for n, (start, stop) in enumerate(ranges):
                end = size if stop is None else min(stop, size)
                if start >= end:
                    continue
                counts[n] += start == 0  # the first line has no newline before it
                handle.seek(max(start - 1, 0))
                left = end - 1 - max(start - 1, 0)
                while left > 0:
                    chunk = handle.read(min(1 << 20, left))
                    if not chunk:
                        break
                    counts[n] += chunk.count(b"\n")
                    left -= len(chunk)
    except FileNotFoundError:
        return [0] * len(ranges)
    return counts


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
