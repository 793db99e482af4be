"""One agent's messages, indexed in memory for BM25 search.

Per document the index keeps a few numbers in flat arrays (date, length, conversation,
role, echo flag, where its line starts in the log) and its tokens in a
:class:`~shared.recall.segments.Segment`. A query touches only the postings of its terms
and vectorises the BM25 arithmetic with numpy; corpus statistics (N, df, avgdl) are
recomputed per query over the documents in scope, exactly as the reference scan in the
tests does, so the two agree on ids, order and scores.

New documents go to an open segment that is frozen every 8,192 documents; eight frozen
small segments are merged into one of 65,536. An append costs its own tokens (and, once
per 8,192 documents, a freeze), never the size of the history. Thread-safe: appends come
from the daemon's event loop while searches and the initial build run in threads.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from shared.recall.documents import Document, EchoTracker, read_documents
from shared.recall.ranking import (
    ECHO_FACTOR,
    K1,
    PHRASE_BONUS,
    B,
    SearchRequest,
    idf,
)
from shared.recall.segments import (
    OPEN_SEGMENT_DOCS,
    SEGMENT_CAPACITY,
    Segment,
    SegmentBuilder,
    bigram_key,
    cjk_bigrams,
    merge,
    word_key,
)
from shared.recall.text import Query, is_cjk, is_cjk_char, parse_query, tokenize

ROLES = ("user", "assistant", "tool")
_ROLE_CODE = {role: code for code, role in enumerate(ROLES)}

Ranked = list[tuple[int, float]]
"""(document number, score), best first."""


class AgentIndex:
    def __init__(
        self,
        *,
        open_segment_docs: int = OPEN_SEGMENT_DOCS,
        segment_capacity: int = SEGMENT_CAPACITY,
    ) -> None:
        """The sizes are parameters only so tests can exercise freezing and merging."""
        self._open_segment_docs = open_segment_docs
        self._segment_capacity = min(segment_capacity, SEGMENT_CAPACITY)
        self._lock = threading.Lock()
        self.conversations: list[str] = []
        self._conversation_numbers: dict[str, int] = {}
        self._trackers: dict[str, EchoTracker] = {}
        self._created = array("d")
        self._lengths = array("I")
        self._conversation = array("I")
        self._role = array("B")
        self._echo = array("B")
        self._offsets = array("q")
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
        tokens = tokenize(document.text)
        if tokens:
            with self._lock:
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
        self._lengths.append(len(tokens))
        self._conversation.append(number)
        self._role.append(_ROLE_CODE[document.role])
        self._echo.append(1 if document.echo else 0)
        self._offsets.append(document.offset)
        self._ids += document.message_id.encode()
        self._id_starts.append(len(self._ids))
        self._open.add(tokens)

    def _freeze(self) -> None:
        if self._open.size == 0:
            return
        self._segments.append(self._open.freeze())
        self._open = SegmentBuilder(len(self._created))
        count = self._segment_capacity // self._open_segment_docs
        small = [s for s in self._segments[-count:] if s.size == self._open_segment_docs]
        if count > 1 and len(small) == count:
            self._segments[-count:] = [merge(small)]

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._created)

    def message_id(self, number: int) -> str:
        return self._ids[self._id_starts[number] : self._id_starts[number + 1]].decode()

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
            if not self._created:
                return []
            return _Search(self, query, request).run()


class _Search:
    """One query against the index's state at the moment (the caller holds the lock)."""

    def __init__(self, index: AgentIndex, query: Query, request: SearchRequest) -> None:
        self.index = index
        self.query = query
        self.request = request
        self.count = len(index._created)
        self.created = np.frombuffer(index._created, dtype=np.float64)
        self.lengths = np.frombuffer(index._lengths, dtype=np.uint32)
        self.conversation = np.frombuffer(index._conversation, dtype=np.uint32)
        self.role = np.frombuffer(index._role, dtype=np.uint8)
        self.segments: list[Segment | SegmentBuilder] = [*index._segments, index._open]

    def run(self) -> Ranked:
        scope = self._scope()
        if scope is None or not scope.any():
            return []
        echo = np.frombuffer(self.index._echo, dtype=np.uint8).astype(bool)
        self._demote_question(scope, echo)
        corpus = scope & ~echo
        if not corpus.any():
            corpus = scope
        corpus_size = int(corpus.sum())
        avgdl = int(self.lengths[corpus].sum(dtype=np.int64)) / corpus_size
        scores = np.zeros(self.count)
        candidates = np.zeros(self.count, dtype=bool)
        for term in self.query.terms:
            docs, tfs = self._postings(term)
            weight = idf(corpus_size, int(corpus[docs].sum()))
            keep = scope[docs]
            docs, tf = docs[keep], tfs[keep].astype(np.float64)
            scores[docs] += (
                weight
                * tf
                * (K1 + 1)
                / (tf + K1 * (1 - B + B * self.lengths[docs] / max(avgdl, 1.0)))
            )
            if not self.query.phrases:
                candidates[docs] = True
        if self.query.phrases:
            candidates = scope.copy()
            for phrase in self.query.phrases:
                candidates &= self._phrase_mask(phrase)
        numbers = np.flatnonzero(candidates)
        final = scores[numbers] + PHRASE_BONUS * len(self.query.phrases)
        final[echo[numbers]] *= ECHO_FACTOR
        return self._top(numbers, final)

    def _scope(self) -> np.ndarray | None:
        request = self.request
        scope = np.ones(self.count, dtype=bool)
        if request.conversation_id is not None:
            number = self.index._conversation_numbers.get(request.conversation_id)
            if number is None:
                return None
            scope &= self.conversation == number
        if request.role is not None:
            if request.role not in _ROLE_CODE:
                return None
            scope &= self.role == _ROLE_CODE[request.role]
        if request.since is not None:
            scope &= self.created >= request.since.timestamp()
        if request.until is not None:
            scope &= self.created <= request.until.timestamp()
        return scope

    def _demote_question(self, scope: np.ndarray, echo: np.ndarray) -> None:
        """In-conversation recall: the conversation's newest user message is the question."""
        request = self.request
        if request.conversation_id is not None or request.current_conversation_id is None:
            return
        number = self.index._conversation_numbers.get(request.current_conversation_id)
        if number is None:
            return
        mine = np.flatnonzero(
            scope & (self.conversation == number) & (self.role == _ROLE_CODE["user"])
        )
        if len(mine):
            newest = self.created[mine].max()
            tied = mine[self.created[mine] == newest]
            echo[max(tied, key=self.index.message_id)] = True

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """Documents containing ``term`` (ascending) and its frequency in each."""
        docs: list[np.ndarray] = []
        tfs: list[np.ndarray] = []
        for segment in self.segments:
            if is_cjk(term):
                local, tf = _cjk_postings(segment, term)
            else:
                local, tf = segment.word_postings(word_key(term))
            docs.append(local.astype(np.int64) + segment.base)
            tfs.append(tf)
        return np.concatenate(docs), np.concatenate(tfs)

    def _phrase_mask(self, phrase: str) -> np.ndarray:
        mask = np.zeros(self.count, dtype=bool)
        candidates: np.ndarray | None = None
        for token in dict.fromkeys(phrase.split(" ")):
            docs, _ = self._postings(token)
            candidates = docs if candidates is None else np.intersect1d(candidates, docs)
        if candidates is None or not len(candidates):
            return mask
        pattern = (
            ("" if is_cjk_char(phrase[0]) else " ")
            + phrase
            + ("" if is_cjk_char(phrase[-1]) else " ")
        ).encode()
        for segment in self.segments:
            lo, hi = segment.base, segment.base + segment.size
            text, starts = segment.text, segment.text_starts
            for number in candidates[(candidates >= lo) & (candidates < hi)]:
                local = int(number) - lo
                if text.find(pattern, int(starts[local]), int(starts[local + 1])) != -1:
                    mask[number] = True
        return mask

    def _top(self, numbers: np.ndarray, final: np.ndarray) -> Ranked:
        limit = self.request.limit
        if len(numbers) > limit:
            kth = np.partition(final, len(final) - limit)[len(final) - limit]
            chosen = final >= kth
            numbers, final = numbers[chosen], final[chosen]
        rows = [
            (
                float(score),
                float(self.created[number]),
                self.index.message_id(int(number)),
                int(number),
            )
            for number, score in zip(numbers, final, strict=True)
        ]
        rows.sort(reverse=True)
        return [(number, score) for score, _, _, number in rows[:limit]]


def _cjk_postings(segment: Segment | SegmentBuilder, term: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact substring counts of a CJK term: candidates by bigrams, counted in the text."""
    encoded = term.encode()
    text, starts = segment.text, segment.text_starts
    if len(term) == 1:
        counts: dict[int, int] = {}
        position = text.find(encoded)
        while position != -1:
            local = int(np.searchsorted(starts, position, side="right")) - 1
            counts[local] = counts.get(local, 0) + 1
            position = text.find(encoded, position + len(encoded))
        local_docs = np.array(sorted(counts), dtype=np.int64)
        return local_docs, np.array([counts[d] for d in sorted(counts)], dtype=np.int64)
    candidates: np.ndarray | None = None
    for bigram in sorted(cjk_bigrams(term)):
        docs = segment.bigram_docs(bigram_key(bigram))
        candidates = docs if candidates is None else np.intersect1d(candidates, docs)
        if not len(candidates):
            break
    assert candidates is not None
    found_docs: list[int] = []
    found_tfs: list[int] = []
    for local in candidates.tolist():
        count = text.count(encoded, int(starts[local]), int(starts[local + 1]))
        if count:
            found_docs.append(local)
            found_tfs.append(count)
    return np.array(found_docs, dtype=np.int64), np.array(found_tfs, dtype=np.int64)


def build_agent_index(conversation_logs: Iterable[tuple[str, Path]]) -> AgentIndex:
    """An index over every conversation log of an agent, in the order given."""
    index = AgentIndex()

    def documents() -> Iterable[Document]:
        for conversation_id, path in conversation_logs:
            tracker = index.tracker(conversation_id)
            yield from read_documents(path, tracker)

    index.build(documents())
    return index
