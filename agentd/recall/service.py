"""The daemon's recall: one index per agent, opened from disk at start, fed by every append.

Each agent's index is tantivy's (:class:`shared.recall.index.AgentIndex`) in
``agents/<id>/recall/``, a cache of the logs: at start a background thread opens it (its
segments are memory-mapped, nothing is read) and a search of that agent is answered from
then on; then it reads from the logs what the index does not hold yet (every
conversation's messages after the last one indexed), which is what status calls
*catching up*, or *rebuilding* when the index was missing, of another format or
analyzer, unreadable, or a conversation's log no longer holds what was indexed from it.
Appends that happen meanwhile are queued and applied after it (those it already read are
skipped by their byte offset), so no message is missed or counted twice.

What is appended is committed by one writer thread shortly after (a commit writes and
syncs a segment: not on the thread reading the daemon's frames), and by any search that
comes first, so a search sees every append made before it. A commit is atomic, and each
conversation's messages are indexed in log order, so after a kill -9 the index holds a
prefix of every log and the next start reads on from its end: nothing is lost or doubled.

Searches run in threads of their own at background priority (:mod:`shared.priority`), as
does the catch-up: a search is CPU work, and the daemon must not wait behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agentd.recall.catchup import Uncovered, lines_in, opened, plan_of, read_around, read_hit
from agentd.recall.frames import WRITE_AT_STOP_S
from shared.priority import lower_this_thread
from shared.recall.documents import Document, read_documents
from shared.recall.index import AgentIndex
from shared.recall.ranking import Found, Hit, SearchRequest
from shared.store.layout import Layout, RecallFiles

log = structlog.get_logger(__name__)

SEARCH_THREADS = 2
"""Recall's own threads: searches are CPU work, so more would only share the same cores."""
READY_POLL_S = 0.005
"""How often a search waiting for its agent's index to open looks again."""
READ_AT_OPEN = 256
"""Lines the index misses that opening reads at once (a few ms) rather than in the
background: what an orderly stop leaves (lines that are not messages to index, a summary
or a stop record) or a short tail."""
COUNT_AT_OPEN_BYTES = 1 << 20
"""Logs this small are counted even when the index is rebuilt from nothing (a millisecond
of reading), so a small agent just imported or restored is read at open and its first
search finds everything, while a large one rebuilds in the background."""
COMMIT_DELAY_S = 0.2
"""How long after an append the writer thread commits it (appends in between join the
same commit; a search commits at once what it must see)."""

T = TypeVar("T")


class _AgentRecall:
    def __init__(self, files: RecallFiles) -> None:
        self.files = files
        self.index: AgentIndex | None = None
        self.searchable = threading.Event()
        """Set once the index is open and what it misses is counted: searches are
        answered from then on."""
        self.ready = threading.Event()
        """Set once everything the logs hold is indexed (appends then go in at once)."""
        self.read_up_to: dict[str, int] = {}
        """Per conversation, past the last line the catch-up read (appends below it are in)."""
        self.pending: list[tuple[str, list[dict[str, Any]], list[int]]] = []
        self.rebuilding: str | None = None
        self.work: list[Uncovered] = []
        self.to_read: int | None = None
        """Lines the catch-up has still to read (counted before searches are answered,
        then counted down); None while rebuilding large logs (not counted)."""
        self.closed = False
        self.commit_due = False

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
        if missing == 0:
            return None
        return f"index catching up: {missing:,} messages not searchable yet"

    def _missing(self) -> int:
        return (self.to_read or 0) + sum(len(messages) for _, messages, _ in self.pending)


class RecallService:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._agents: dict[str, _AgentRecall] = {}
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(
            SEARCH_THREADS, thread_name_prefix="recall", initializer=lower_this_thread
        )
        self._writes: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._write, name="recall-write", daemon=True).start()

    def _new_state(self, agent_id: str) -> _AgentRecall:
        return _AgentRecall(self.layout.recall_files(agent_id))

    # --- the writer thread -----------------------------------------------------------------

    def _write(self) -> None:
        """Commits (and closing indexes), one at a time, in order."""
        lower_this_thread()
        while True:
            job = self._writes.get()
            try:
                job()
            except Exception:
                log.exception("recall_write_failed")

    def _commit_soon(self, state: _AgentRecall) -> None:
        if state.commit_due:
            return
        state.commit_due = True

        def commit() -> None:
            state.commit_due = False
            if state.index is not None and not state.closed:
                state.index.commit()

        timer = threading.Timer(COMMIT_DELAY_S, self._writes.put, (commit,))
        timer.daemon = True
        timer.start()

    def wait_for_writes(self, timeout_s: float | None = None) -> bool:
        """Return once what was queued for the writer thread is done, or after
        ``timeout_s``; False if it was not all done by then."""
        done = threading.Event()
        self._writes.put(done.set)
        return done.wait(timeout_s)

    def flush(self, timeout_s: float = WRITE_AT_STOP_S) -> bool:
        """At an orderly stop: commit what every agent's index holds (waiting at most
        ``timeout_s``); whatever is cut short is read again from the logs at the next
        start, as after a kill. An index still opening (a stop right after the start) is
        waited for first: its opening reads what the logs gained since the last commit."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            opening = list(self._agents.values())
        for state in opening:
            state.searchable.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            states = [state for state in self._agents.values() if state.index is not None]
        for state in states:
            self._writes.put(_closer(state))
        written = self.wait_for_writes(max(0.0, deadline - time.monotonic()))
        log.info(
            "recall_committed" if written else "recall_commit_cut_short",
            agents=len(states),
            seconds=round(time.perf_counter() - started, 2),
        )
        return written

    # --- opening ---------------------------------------------------------------------------

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
        """Forget the agent's index: it was deleted, or is opened again with :meth:`start`.
        A build still running fills an index nobody reads; its files are let go."""
        with self._lock:
            state = self._agents.pop(agent_id, None)
        if state is not None:
            state.closed = True
            state.searchable.set()
            self._writes.put(_closer(state))

    def _build_all(self, states: list[tuple[str, _AgentRecall]]) -> None:
        for agent_id, state in states:  # at the daemon's priority: searches wait for this
            self._open(agent_id, state)
        lower_this_thread()  # the catch-up is background work
        for agent_id, state in states:
            if state.ready.is_set() or state.index is None or state.closed:
                continue
            started = time.perf_counter()
            try:
                self._catch_up(state)
            except Exception:
                log.exception("recall_build_failed", agent_id=agent_id)
            finally:
                self._finish(state)
            log.info(
                "recall_index_built",
                agent_id=agent_id,
                documents=len(state.index),
                seconds=round(time.perf_counter() - started, 2),
            )

    def _open(self, agent_id: str, state: _AgentRecall) -> None:
        """Open the index and count what it misses; searches are answered from then on.
        With nothing missing the index is ready at once, and with a few lines missing (a
        stop's last messages) it reads them here: a start over what was persisted never
        says "catching up", not even for a moment."""
        started = time.perf_counter()
        try:
            state.index, state.rebuilding = opened(state.files)
            plan = plan_of(self.layout, agent_id, state.index)
            state.work = plan.work
            state.rebuilding = state.rebuilding or plan.rebuilding
            for item in plan.work:
                state.read_up_to[item.conversation_id] = item.start
            large = sum(item.size for item in plan.work) > COUNT_AT_OPEN_BYTES
            if state.rebuilding is None or not large:
                for item in plan.work:
                    item.lines = lines_in(item.path, item.start)
                state.to_read = sum(item.lines or 0 for item in plan.work)
            if state.to_read is not None and state.to_read <= READ_AT_OPEN:
                try:
                    self._catch_up(state)
                finally:
                    self._finish(state)
        except Exception as exc:
            if isinstance(exc, FileNotFoundError) and not self.layout.agent_dir(agent_id).exists():
                state.closed = True  # deleted meanwhile (moved to the trash): its drop follows
                log.info("recall_agent_gone", agent_id=agent_id)
                return
            log.exception("recall_open_failed", agent_id=agent_id)
        finally:
            state.searchable.set()
        log.info(
            "recall_index_opened",
            agent_id=agent_id,
            documents=len(state.index) if state.index is not None else 0,
            rebuilding=state.rebuilding,
            to_read=state.to_read,
            seconds=round(time.perf_counter() - started, 3),
        )

    def _catch_up(self, state: _AgentRecall) -> None:
        """Index what :func:`plan_of` found missing, counting :attr:`_AgentRecall.to_read`
        down as it goes (a log counted empty is not read)."""
        index = state.index
        assert index is not None

        def documents() -> Iterator[Document]:
            for item in state.work:
                left = item.lines
                if left == 0:
                    continue
                tracker = index.tracker(item.conversation_id)
                for document in read_documents(item.path, tracker, item.start):
                    if state.closed:
                        return
                    state.read_up_to[item.conversation_id] = document.offset + 1
                    yield document
                    if left:  # indexed: the build asks for the next one only then
                        left -= 1
                        state.to_read = max(0, (state.to_read or 0) - 1)
                if left:  # lines that were not documents (a summary, a stop record)
                    state.to_read = max(0, (state.to_read or 0) - left)

        index.build(documents())

    def _finish(self, state: _AgentRecall) -> None:
        """The catch-up is done: what was appended meanwhile joins, then appends go in at
        once."""
        with self._lock:
            pending, state.pending = state.pending, []
            for conversation_id, messages, offsets in pending:
                self._add(state, conversation_id, messages, offsets)
            state.ready.set()

    # --- appending -------------------------------------------------------------------------

    def appended(
        self,
        agent_id: str,
        conversation_id: str,
        messages: list[dict[str, Any]],
        offsets: list[int],
    ) -> None:
        """Index ``messages`` (their JSON fields), just appended to the conversation's log
        at ``offsets``."""
        state = self._state(agent_id)
        with self._lock:
            if not state.ready.is_set():
                state.pending.append((conversation_id, messages, offsets))
                return
            self._add(state, conversation_id, messages, offsets)

    def _state(self, agent_id: str) -> _AgentRecall:
        """The agent's state; an agent not started (one created since the start) is
        opened here and now, as small as it is (a catch-up too long for that goes on in
        the background)."""
        with self._lock:
            state = self._agents.get(agent_id)
            if state is not None:
                return state
            state = self._agents[agent_id] = self._new_state(agent_id)
        self._open(agent_id, state)
        if not state.ready.is_set():
            threading.Thread(
                target=self._build_all, args=([(agent_id, state)],), name="recall-build"
            ).start()
        return state

    def _add(
        self,
        state: _AgentRecall,
        conversation_id: str,
        messages: list[dict[str, Any]],
        offsets: list[int],
    ) -> None:
        index = state.index
        if index is None or state.closed:
            return
        read = state.read_up_to.get(conversation_id, 0)
        tracker = index.tracker(conversation_id)
        for fields, offset in zip(messages, offsets, strict=True):
            if offset < read:
                continue
            document = tracker.document(fields, offset)
            if document is not None:
                index.add(document)
        self._commit_soon(state)

    # --- answering -------------------------------------------------------------------------

    async def _ready(self, agent_id: str) -> _AgentRecall:
        """The agent's index once it is open (not necessarily caught up)."""
        state = self._state(agent_id)
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
        return {"state": state.state(), "bytes_on_disk": _bytes_in(state.files.directory)}

    async def _in_thread(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` in one of recall's threads (with the caller's log context)."""
        call = functools.partial(contextvars.copy_context().run, function, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def search(self, agent_id: str, request: SearchRequest) -> Found:
        """The hits, and what they may miss: asked before the search, so a search that
        began while the index was catching up says so even if it ended after."""
        state = await self._ready(agent_id)
        incomplete = state.incomplete()
        if state.index is None:
            return Found([], incomplete)
        hits = await self._in_thread(self._search, agent_id, state.index, request)
        return Found(hits, incomplete)

    def _search(self, agent_id: str, index: AgentIndex, request: SearchRequest) -> list[Hit]:
        hits = []
        for ranked in index.search(request):
            conversation_id = index.conversation_id(ranked.conversation)
            if conversation_id is None:
                continue
            path = self.layout.conversation_files(agent_id, conversation_id).messages
            document = read_hit(path, ranked.offset)
            if document is not None:
                hits.append(
                    Hit(
                        message_id=document.message_id,
                        conversation_id=conversation_id,
                        role=document.role,
                        created_at=document.created_at,
                        score=ranked.score,
                        text=document.text,
                    )
                )
        return hits

    async def around(self, agent_id: str, message_id: str, before: int, after: int) -> list[bytes]:
        """The log lines of the messages around ``message_id`` in its conversation, oldest
        first (the daemon parses them: this process never imports the message models)."""
        state = await self._ready(agent_id)
        return await self._in_thread(
            read_around, self.layout, agent_id, state.index, message_id, before, after
        )


def _closer(state: _AgentRecall) -> Callable[[], None]:
    def close() -> None:
        if state.index is not None:
            state.index.close()

    return close


def _bytes_in(directory: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
    return total
