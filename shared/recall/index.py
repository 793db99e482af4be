"""One agent's messages, indexed in memory for BM25 search.

Per document the index keeps a few numbers in flat arrays (date, length, conversation,
role, echo flag, where its line starts in the log, its neighbours in its conversation
(:mod:`~shared.recall.dialogue`)) and its tokens and index terms in a
:class:`~shared.recall.segments.Segment`; :mod:`shared.recall.search` evaluates a query
over them.

New documents go to an open segment that is frozen every 8,192 documents; eight frozen
small segments are merged into one of 65,536. An append costs its own tokens (and, once
per 8,192 documents, a freeze), never the size of the history. Thread-safe: appends come
from the daemon's event loop while searches and the initial build run in threads.

An index can start from persisted segments (:meth:`restore`) and hand each segment it
freezes to its owner (``on_freeze``) instead of merging inline: the owner then writes it
to disk and merges in the background, swapping the result in with :meth:`replace`, which
holds the lock only for the swap. Without ``on_freeze`` (tests, benchmarks) merges happen
inline as they always did.

A search holds the index's lock for its whole scan (the arrays it reads must not grow
under it), so an append never takes that lock if a search has it: the tokenized document
is queued under a lock held only to hand it over, and joins the arrays at once if the
index is free, else when the next search or append finds it free. A search first takes
in whatever is queued, so it sees every document added before it began.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from shared.recall.dialogue import Neighbours
from shared.recall.documents import Document, EchoTracker
from shared.recall.ranking import SearchRequest
from shared.recall.search import ROLE_CODE, ROLES, IndexView, Ranked, Search
from shared.recall.segments import (
    OPEN_SEGMENT_DOCS,
    SEGMENT_CAPACITY,
    Segment,
    SegmentBuilder,
    merge,
)
from shared.recall.text import index_terms, parse_query, tokenize

COLUMNS = ("created", "lengths", "conversation", "role", "echo", "offsets")
"""The per-document columns (attributes ``_<name>``), as persisted with each segment."""
IDS = "ids"
ID_STARTS = "id_starts"


class AgentIndex:
    def __init__(
        self,
        *,
        open_segment_docs: int = OPEN_SEGMENT_DOCS,
        segment_capacity: int = SEGMENT_CAPACITY,
        on_freeze: Callable[[Segment], None] | None = None,
    ) -> None:
        """The sizes are parameters only so tests can exercise freezing and merging.
        ``on_freeze`` is called (under the lock: it must only hand the segment over) with
        each segment frozen, and then merging is the caller's job."""
        self._open_segment_docs = open_segment_docs
        self._segment_capacity = min(segment_capacity, SEGMENT_CAPACITY)
        self._on_freeze = on_freeze
        self._lock = threading.Lock()
        """Held by a search for its scan, and while queued documents join the arrays."""
        self._queued: list[tuple[Document, list[str]]] = []
        self._queue_lock = threading.Lock()
        """Held only to hand a document over or take the queue: appends never wait long."""
        self.conversations: list[str] = []
        self._conversation_numbers: dict[str, int] = {}
        self._trackers: dict[str, EchoTracker] = {}
        self._created = array("d")
        self._lengths = array("I")
        self._conversation = array("I")
        self._role = array("B")
        self._echo = array("B")
        self._offsets = array("q")
        self._neighbours = Neighbours()
        self._ids = bytearray()
        self._id_starts = array("Q", [0])
        self._segments: list[Segment] = []
        self._open = SegmentBuilder(0)

    # --- adding ----------------------------------------------------------------------------

    def build(self, documents: Iterable[Document]) -> None:
        """Add many documents, freezing full 65,536-document segments as they fill."""
        for document in documents:
            tokens = tokenize(document.text)
            if tokens:
                with self._lock:
                    self._append(document, tokens, freeze_at=self._segment_capacity)
        with self._lock:
            self._freeze()

    def add(self, document: Document) -> None:
        """Index a new document; never waits for a running search (see the module)."""
        tokens = tokenize(document.text)
        if not tokens:
            return
        with self._queue_lock:
            self._queued.append((document, tokens))
        if self._lock.acquire(blocking=False):
            try:
                self._take_queued()
            finally:
                self._lock.release()

    def _take_queued(self) -> None:
        """Append the queued documents, in order (the caller holds ``_lock``)."""
        with self._queue_lock:
            queued, self._queued = self._queued, []
        for document, tokens in queued:
            self._append(document, tokens, freeze_at=self._open_segment_docs)

    def tracker(self, conversation_id: str) -> EchoTracker:
        """The echo state of one conversation, carried from the build into live appends."""
        return self._trackers.setdefault(conversation_id, EchoTracker())

    def _append(self, document: Document, tokens: list[str], *, freeze_at: int) -> None:
        if self._open.size >= freeze_at:
            self._freeze()
        number = self._conversation_numbers.get(document.conversation_id)
        if number is None:
            number = self._conversation_numbers[document.conversation_id] = len(self.conversations)
            self.conversations.append(document.conversation_id)
        self._created.append(document.created_at)
        terms = index_terms(tokens)
        self._lengths.append(len(terms))
        self._conversation.append(number)
        self._neighbours.append(number)
        self._role.append(ROLE_CODE[document.role])
        self._echo.append(1 if document.echo else 0)
        self._offsets.append(document.offset)
        self._ids += document.message_id.encode()
        self._id_starts.append(len(self._ids))
        self._open.add(tokens, terms)

    def _freeze(self) -> None:
        if self._open.size == 0:
            return
        frozen = self._open.freeze()
        self._segments.append(frozen)
        self._open = SegmentBuilder(len(self._created))
        if self._on_freeze is not None:
            self._on_freeze(frozen)
            return
        count = self._segment_capacity // self._open_segment_docs
        small = [s for s in self._segments[-count:] if s.size == self._open_segment_docs]
        if count > 1 and len(small) == count:
            self._segments[-count:] = [merge(small)]

    def freeze(self) -> None:
        """Freeze the open segment now (a build's last documents, before persisting)."""
        with self._lock:
            self._take_queued()
            self._freeze()

    # --- persisted segments ------------------------------------------------------------

    def restore(
        self,
        conversations: Sequence[str],
        parts: Sequence[tuple[Segment, Mapping[str, np.ndarray]]],
    ) -> None:
        """Start an empty index from persisted segments, each with its documents' columns
        (:meth:`columns`); the segments' bases must follow one another from 0."""
        with self._lock:
            if self._created:
                raise RuntimeError("restore() needs an empty index")
            self.conversations = list(conversations)
            self._conversation_numbers = {c: n for n, c in enumerate(self.conversations)}
            for name in COLUMNS:
                column: array = getattr(self, f"_{name}")
                for _, columns in parts:
                    column.frombytes(_bytes_of(columns[name]))
            for _, columns in parts:
                starts = columns[ID_STARTS].astype(np.uint64) + np.uint64(len(self._ids))
                self._id_starts.frombytes(_bytes_of(starts[1:]))
                self._ids += _bytes_of(columns[IDS])
            self._relink()
            self._segments = [segment for segment, _ in parts]
            self._open = SegmentBuilder(len(self._created))

    def relink(self) -> None:
        """Link every document to its neighbours in log order again (after documents were
        added out of it: a persisted index's gaps, read after the rest)."""
        with self._lock:
            self._take_queued()
            self._relink()

    def _relink(self) -> None:
        self._neighbours = Neighbours.from_conversations(
            np.frombuffer(self._conversation, dtype=np.uint32),
            np.frombuffer(self._offsets, dtype=np.int64),
        )

    def columns(self, segment: Segment) -> dict[str, np.ndarray]:
        """A copy of the columns of ``segment``'s documents (what is persisted beside it)."""
        lo, hi = segment.base, segment.base + segment.size
        with self._lock:
            found = {
                name: np.frombuffer(getattr(self, f"_{name}"), dtype=self._typecode(name))[
                    lo:hi
                ].copy()
                for name in COLUMNS
            }
            starts = np.frombuffer(self._id_starts, dtype=np.uint64)[lo : hi + 1].copy()
            found[IDS] = np.frombuffer(self._ids, dtype=np.uint8)[starts[0] : starts[-1]].copy()
        found[ID_STARTS] = starts - starts[0]
        return found

    def _typecode(self, name: str) -> str:
        return str(getattr(self, f"_{name}").typecode)

    def frozen(self) -> list[Segment]:
        """The frozen segments, in document order."""
        with self._lock:
            return list(self._segments)

    def replace(self, old: Sequence[Segment], new: Segment) -> bool:
        """Put ``new`` in place of ``old`` (consecutive segments holding the same documents:
        a merge, or a segment's mapped twin); False if ``old`` is no longer in place."""
        with self._lock:
            for start in range(len(self._segments) - len(old) + 1):
                run = self._segments[start : start + len(old)]
                if all(a is b for a, b in zip(run, old, strict=True)):
                    self._segments[start : start + len(old)] = [new]
                    return True
        return False

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._created)

    def message_id(self, number: int) -> str:
        return self._ids[self._id_starts[number] : self._id_starts[number + 1]].decode()

    def number_of(self, message_id: str) -> int | None:
        """The document number of a message id, or None (a search of the id blob in C)."""
        wanted = message_id.encode()
        with self._lock:
            self._take_queued()
            position = self._ids.find(wanted)
            while position != -1:
                number = bisect.bisect_left(self._id_starts, position)
                if (
                    number < len(self._id_starts) - 1
                    and self._id_starts[number] == position
                    and self._id_starts[number + 1] == position + len(wanted)
                ):
                    return number
                position = self._ids.find(wanted, position + 1)
        return None

    def numbers_ending(self, suffix: str) -> list[int]:
        """The document numbers whose message id ends with ``suffix`` (a short id)."""
        wanted = suffix.encode()
        found = []
        with self._lock:
            self._take_queued()
            position = self._ids.find(wanted)
            while position != -1:
                end = position + len(wanted)
                following = bisect.bisect_left(self._id_starts, end)
                if (
                    following < len(self._id_starts)
                    and self._id_starts[following] == end
                    and self._id_starts[following - 1] <= position
                ):
                    found.append(following - 1)
                position = self._ids.find(wanted, position + 1)
        return found

    def locate(self, number: int) -> tuple[str, int]:
        """(conversation id, byte offset of the message's line) of a document."""
        return self.conversations[self._conversation[number]], self._offsets[number]

    def role(self, number: int) -> str:
        return ROLES[self._role[number]]

    def created_at(self, number: int) -> float:
        return self._created[number]

    @property
    def nbytes(self) -> int:
        """Memory held by the index's arrays and texts (not Python object overhead)."""
        arrays = (
            self._created,
            self._lengths,
            self._conversation,
            self._role,
            self._echo,
            self._offsets,
            self._neighbours.previous,
            self._neighbours.following,
            self._id_starts,
        )
        return (
            sum(a.itemsize * len(a) for a in arrays)
            + len(self._ids)
            + sum(s.nbytes for s in self._segments)
            + self._open.nbytes
        )

    # --- searching -------------------------------------------------------------------------

    def search(self, request: SearchRequest) -> Ranked:
        query = parse_query(request.query)
        if query.empty or request.limit <= 0:
            return []
        with self._lock:
            self._take_queued()
            if not self._created:
                return []
            return Search(self._view(), query, request).run()

    def _view(self) -> IndexView:
        """The index as a search reads it (the caller holds ``_lock``)."""
        return IndexView(
            created=self._created,
            lengths=self._lengths,
            conversation=self._conversation,
            role=self._role,
            echo=self._echo,
            previous=self._neighbours.previous,
            following=self._neighbours.following,
            segments=[*self._segments, self._open],
            conversation_numbers=self._conversation_numbers,
            message_id=self.message_id,
        )


def _bytes_of(values: np.ndarray) -> memoryview:
    """The bytes of an array, without a copy where it is contiguous."""
    return memoryview(np.ascontiguousarray(values)).cast("B")
