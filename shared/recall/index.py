"""One agent's messages in a tantivy index on disk.

tantivy keeps the postings (in segments it writes, memory-maps and merges in threads of
its own) and evaluates queries; this class feeds it messages in log order, numbering each
conversation's messages (``seq``, see :mod:`shared.recall.schema`), and answers searches
with :func:`shared.recall.search.run`.

A message added is searchable once committed: a commit writes and syncs a new segment
and publishes it atomically, so after a crash the index holds exactly the commits that
finished, and every conversation's indexed messages are a prefix of its log (they are
added in log order). :meth:`tail` says where each one ends, which is where reading the log
resumes. A search commits first what was added before it, so it sees every message added
before it began; otherwise the owner commits when it likes (:meth:`commit`).

Thread-safe: appends, commits and lookups take one lock; a search holds it only to
commit, then reads the snapshot (a tantivy searcher) it took, while appends go on.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import tantivy

from shared.recall import search
from shared.recall.documents import Document, EchoTracker
from shared.recall.ranking import SearchRequest
from shared.recall.schema import (
    ROLE_CODE,
    SEQ_MASK,
    block_of,
    conversation_hash,
    fast_ints,
    keys_of,
    message_key,
    offsets_of,
    open_index,
    to_document,
)
from shared.recall.text import parse_query

WRITER_HEAP = 16_000_000
"""Bytes tantivy's writer buffers before it writes a segment on its own (its least)."""
BUILD_HEAP = 256_000_000
"""The same while a build reads the logs: fewer, larger segments, fewer merges. 200,000
messages of the bench's corpus fit (one segment: 0.96× the raw text on disk where two
segments of 128 MB took 1.01×); it is what the recall process may grow by while it
rebuilds a large agent's index, and no more."""
BUILD_COMMIT = 200_000
"""Messages a build adds between commits: what a crash makes it read again, at most."""


@dataclass(frozen=True, slots=True)
class Tail:
    """A conversation's newest indexed message."""

    seq: int
    offset: int
    """Where its line starts in the conversation's log."""


class AgentIndex:
    def __init__(self, directory: Path) -> None:
        """The index in ``directory`` (opened, or made empty). Raises what tantivy raises
        for an index it cannot open.

        Never in memory: there tantivy takes its meta lock by retrying every 100 ms, and a
        merge ending in the background holds it while it cleans up, so making a commit
        searchable waited 100 ms for two commits in three when they came one by one. On
        disk the lock is a flock, waited on only as long as it is held."""
        self._index = open_index(directory)
        self._schema = self._index.schema
        self._lock = threading.Lock()
        self._writer: tantivy.IndexWriter | None = None
        self._heap = WRITER_HEAP
        self._uncommitted = 0
        self._searcher = self._index.searcher()
        self._conversations: dict[int, str] = {}
        """Conversation hash → id, for every conversation added or named (:meth:`know`)."""
        self._next_seq: dict[int, int] = {}
        self._asking: dict[int, int] = {}
        """Per conversation, the key of its newest user message, once known."""
        self._trackers: dict[str, EchoTracker] = {}

    # --- adding ----------------------------------------------------------------------------

    def know(self, conversation_ids: Iterable[str]) -> None:
        """Name conversations whose messages the index may hold (a hit says its
        conversation's hash; this says its id)."""
        with self._lock:
            for conversation_id in conversation_ids:
                self._conversations[conversation_hash(conversation_id)] = conversation_id

    def add(self, document: Document) -> None:
        with self._lock:
            self._add(document)

    def build(self, documents: Iterable[Document]) -> None:
        """Add many documents, committing every :data:`BUILD_COMMIT` of them and at the
        end, with a writer that buffers more."""
        self._use_writer(BUILD_HEAP)
        try:
            for count, document in enumerate(documents, 1):
                with self._lock:
                    self._add(document)
                if count % BUILD_COMMIT == 0:
                    self.commit()
            self.commit()
        finally:
            self._use_writer(WRITER_HEAP)

    def _add(self, document: Document) -> None:
        conversation = conversation_hash(document.conversation_id)
        self._conversations[conversation] = document.conversation_id
        seq = self._next_seq.get(conversation)
        if seq is None:
            tail = self._tail(conversation)
            seq = 0 if tail is None else tail.seq + 1
        self._next_seq[conversation] = seq + 1
        if document.role == "user":
            self._asking[conversation] = message_key(conversation, seq)
        self._writer_now().add_document(to_document(document, conversation, seq))
        self._uncommitted += 1

    def _writer_now(self) -> tantivy.IndexWriter:
        if self._writer is None:
            self._writer = self._index.writer(heap_size=self._heap, num_threads=1)
        return self._writer

    def _use_writer(self, heap: int) -> None:
        """Commit, and have the next add open a writer of ``heap`` bytes."""
        self.commit()
        with self._lock:
            self._heap = heap
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None

    def commit(self) -> None:
        """Make what was added searchable (and durable, on disk)."""
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self._writer is None or not self._uncommitted:
            return
        self._writer.commit()
        self._uncommitted = 0
        self._index.reload()
        self._searcher = self._index.searcher()

    def tracker(self, conversation_id: str) -> EchoTracker:
        """The echo state of one conversation, carried from the build into live appends."""
        return self._trackers.setdefault(conversation_id, EchoTracker())

    def delete_conversation(self, conversation: int) -> None:
        """Forget a conversation's messages (by its hash: its log changed under the index,
        or is gone), at once."""
        with self._lock:
            self._writer_now().delete_documents_by_query(
                tantivy.Query.term_query(self._schema, "conv", conversation)
            )
            self._uncommitted += 1
            self._next_seq[conversation] = 0
            self._asking.pop(conversation, None)
            conversation_id = self._conversations.get(conversation)
            if conversation_id is not None:
                self._trackers.pop(conversation_id, None)
            self._commit()

    def close(self) -> None:
        """Commit, and let the index's files go (its writer holds a lock file)."""
        with self._lock:
            self._commit()
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            return int(self._searcher.num_docs) + self._uncommitted

    def tail(self, conversation_id: str) -> Tail | None:
        """The conversation's newest indexed (committed) message, if any."""
        with self._lock:
            return self._tail(conversation_hash(conversation_id))

    def _tail(self, conversation: int) -> Tail | None:
        found = self._searcher.search(
            tantivy.Query.term_query(self._schema, "conv", conversation),
            1,
            count=False,
            order_by_field="key",  # within one conversation: by seq
        ).hits
        if not found:
            return None
        address = found[0][1]
        (key,) = keys_of(self._searcher, [address])
        (offset,) = offsets_of(self._searcher, [address])
        return Tail(key & SEQ_MASK, offset)

    def conversations(self) -> set[int]:
        """The hashes of the conversations the index holds messages of."""
        with self._lock:
            searcher = self._searcher
        if not searcher.num_docs:
            return set()
        found = searcher.aggregate(
            tantivy.Query.all_query(), {"c": {"terms": {"field": "conv", "size": 1 << 30}}}
        )
        return {int(bucket["key"]) for bucket in found["c"]["buckets"]}

    def conversation_id(self, conversation: int) -> str | None:
        return self._conversations.get(conversation)

    def locate(self, message_id: str, *, suffix: bool = False) -> list[tuple[str, int]]:
        """(conversation id, offset) of the message with this id, or of every message
        whose id ends with it (``suffix``: a short id, as agentctl shows it)."""
        with self._lock:
            self._commit()
            searcher = self._searcher
        if suffix:
            query = tantivy.Query.regex_query(self._schema, "id", ".*" + re.escape(message_id))
        else:
            query = tantivy.Query.term_query(self._schema, "id", message_id)
        hits = searcher.search(query, 1 << 16, count=False).hits
        addresses = [address for _, address in hits]
        conversations = fast_ints(searcher, "conv", addresses)
        offsets = offsets_of(searcher, addresses)
        return [
            (name, offset)
            for conversation, offset in zip(conversations, offsets, strict=True)
            if (name := self._conversations.get(conversation)) is not None
        ]

    # --- searching -------------------------------------------------------------------------

    def search(self, request: SearchRequest) -> list[search.Ranked]:
        query = parse_query(request.query)
        if query.empty or request.limit <= 0:
            return []
        if request.role is not None and request.role not in ROLE_CODE:
            return []
        conversation = None
        if request.conversation_id is not None:
            conversation = conversation_hash(request.conversation_id)
        with self._lock:
            self._commit()
            searcher = self._searcher
            asking = self._question(request)
        return search.run(searcher, self._schema, query, request, conversation, asking)

    def _question(self, request: SearchRequest) -> tantivy.DocAddress | None:
        """The question being asked: the asking conversation's newest user message (the
        caller holds the lock, and has committed)."""
        if request.conversation_id is not None or request.current_conversation_id is None:
            return None
        conversation = conversation_hash(request.current_conversation_id)
        key = self._asking.get(conversation)
        if key is not None:  # one of the (at most eight) messages of its block
            query = tantivy.Query.term_query(self._schema, "block", block_of(key))
            block = [address for _, address in self._searcher.search(query, 8, count=False).hits]
            found = [
                (0.0, address)
                for address, other in zip(block, keys_of(self._searcher, block), strict=True)
                if other == key
            ]
        else:  # not added since the index was opened: the newest in the index
            users = [
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, field, value))
                for field, value in (("conv", conversation), ("role", ROLE_CODE["user"]))
            ]
            found = self._searcher.search(
                tantivy.Query.boolean_query(users), 1, count=False, order_by_field="key"
            ).hits
            if found:
                (self._asking[conversation],) = keys_of(self._searcher, [found[0][1]])
        return found[0][1] if found else None
