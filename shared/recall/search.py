"""Query evaluation: one BM25 search over an agent's index, and the order of its hits.

Apart from the index (which stores documents and takes appends) because evaluating a
query is its own job with its own rules: a query touches only the postings of its terms
and vectorises the BM25 arithmetic with numpy; corpus statistics (N, df, avgdl) are
recomputed per query over the documents in scope, exactly as the reference scan in the
tests does, so the two agree on ids, order and scores. The scope is applied first: CJK
frequencies come from the bigram postings where those settle them, and the text is only
read (to count a CJK term or check a phrase) for the in-scope candidates that remain.
Words are looked up by their index terms (stems); the text holds the tokens, so phrases
are checked in it as typed, stopwords included.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from shared.recall.ranking import (
    ECHO_FACTOR,
    K1,
    NEIGHBOUR_SHARE,
    PHRASE_BONUS,
    B,
    SearchRequest,
    idf,
)
from shared.recall.segments import (
    MAX_BIGRAM_TF,
    OFFSET_MODULUS,
    Segment,
    SegmentBuilder,
    bigram_key,
    bigram_offsets,
    bigram_tfs,
    cjk_bigrams,
    word_key,
)
from shared.recall.text import STOPWORDS, Query, index_term, is_cjk, is_cjk_char

ROLES = ("user", "assistant", "tool")
ROLE_CODE = {role: code for code, role in enumerate(ROLES)}
"""How the index's role column spells a role (one byte per document)."""

TEXT_BATCH = 1_024
"""Documents whose text one ``count``/``find`` batch reads without letting go of the
interpreter lock (about a millisecond's worth)."""

Ranked = list[tuple[int, float]]
"""(document number, score), best first."""


@dataclass(frozen=True, slots=True)
class IndexView:
    """What a search reads of the index: its per-document columns (one entry per document
    number), its segments and its conversation numbers. Valid while the index's lock is
    held, since the arrays must not grow under the scan."""

    created: array[float]
    lengths: array[int]
    conversation: array[int]
    role: array[int]
    echo: array[int]
    previous: array[int]
    following: array[int]
    """Each document's neighbours in its conversation (itself where it has none)."""
    segments: Sequence[Segment | SegmentBuilder]
    conversation_numbers: dict[str, int]
    message_id: Callable[[int], str]


class Search:
    """One query against the index's state at the moment (the caller holds the lock).

    Everything is restricted to the request's scope as early as possible: segments without
    an in-scope document are skipped, postings are cut to the scope before any per-document
    work, and the text is only read (``count``, ``find``) for in-scope candidates.
    """

    def __init__(self, index: IndexView, query: Query, request: SearchRequest) -> None:
        self.index = index
        self.query = query
        self.request = request
        self.count = len(index.created)
        self.created = np.frombuffer(index.created, dtype=np.float64)
        self.lengths = np.frombuffer(index.lengths, dtype=np.uint32)
        self.conversation = np.frombuffer(index.conversation, dtype=np.uint32)
        self.role = np.frombuffer(index.role, dtype=np.uint8)
        self.previous = np.frombuffer(index.previous, dtype=np.uint32)
        self.following = np.frombuffer(index.following, dtype=np.uint32)
        self.segments: list[Segment | SegmentBuilder] = list(index.segments)
        self.scope: np.ndarray
        self.filtered = False

    def run(self) -> Ranked:
        scope = self._scope()
        if scope is None or not scope.any():
            return []
        self._restrict(scope)
        echo = np.frombuffer(self.index.echo, dtype=np.uint8).astype(bool)
        self._demote_question(echo)
        scores, shares, matched = self._term_scores(echo)
        numbers = self._phrase_matches() if self.query.phrases else matched
        final = scores[numbers] + shares[numbers] + PHRASE_BONUS * len(self.query.phrases)
        final[echo[numbers]] *= ECHO_FACTOR
        return self._top(numbers, final)

    # --- scope -----------------------------------------------------------------------------

    def _scope(self) -> np.ndarray | None:
        request = self.request
        scope = np.ones(self.count, dtype=bool)
        if request.conversation_id is not None:
            number = self.index.conversation_numbers.get(request.conversation_id)
            if number is None:
                return None
            scope &= self.conversation == number
        if request.role is not None:
            if request.role not in ROLE_CODE:
                return None
            scope &= self.role == ROLE_CODE[request.role]
        if request.since is not None:
            scope &= self.created >= request.since.timestamp()
        if request.until is not None:
            scope &= self.created <= request.until.timestamp()
        return scope

    def _restrict(self, scope: np.ndarray) -> None:
        """Search only segments holding an in-scope document (a date range is a few)."""
        self.scope = scope
        self.filtered = not scope.all()
        if self.filtered:
            self.segments = [s for s in self.segments if scope[s.base : s.base + s.size].any()]

    def _in_scope(self, docs: np.ndarray, tfs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.filtered:
            return docs, tfs
        keep = self.scope[docs]
        return docs[keep], tfs[keep]

    def _demote_question(self, echo: np.ndarray) -> None:
        """In-conversation recall: the conversation's newest user message is the question."""
        request = self.request
        if request.conversation_id is not None or request.current_conversation_id is None:
            return
        number = self.index.conversation_numbers.get(request.current_conversation_id)
        if number is None:
            return
        mine = np.flatnonzero(
            self.scope & (self.conversation == number) & (self.role == ROLE_CODE["user"])
        )
        if len(mine):
            newest = self.created[mine].max()
            tied = mine[self.created[mine] == newest]
            echo[max(tied, key=self.index.message_id)] = True

    # --- terms -----------------------------------------------------------------------------

    def _term_scores(self, echo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """BM25 of the terms for every document (zero where none occurs), the shares its
        neighbours lend it, and the in-scope documents holding a term, ascending.

        The corpus statistics are the reference scan's: N and avgdl over the in-scope
        non-echo documents (all in-scope ones if that leaves none), df over the same.
        """
        scores = np.zeros(self.count)
        shares = np.zeros(self.count)
        matched = np.zeros(self.count, dtype=bool)
        if not self.query.terms:
            return scores, shares, np.flatnonzero(matched)
        corpus = self.scope & ~echo
        if not corpus.any():
            corpus = self.scope
        corpus_size = int(np.count_nonzero(corpus))
        avgdl = int(np.sum(self.lengths, where=corpus, dtype=np.int64)) / corpus_size
        for term in self.query.terms:
            docs, tfs = self._postings(term)
            weight = idf(corpus_size, int(np.count_nonzero(corpus[docs])))
            tf = tfs.astype(np.float64)
            own = (
                weight
                * tf
                * (K1 + 1)
                / (tf + K1 * (1 - B + B * self.lengths[docs] / max(avgdl, 1.0)))
            )
            scores[docs] += own
            matched[docs] = True
            self._lend(shares, docs, own, echo)
        return scores, shares, np.flatnonzero(matched)

    def _lend(
        self, shares: np.ndarray, docs: np.ndarray, own: np.ndarray, echo: np.ndarray
    ) -> None:
        """Add a share of one term's scores (``own``, of ``docs``) to the neighbours of
        ``docs`` that lack the term; echoes lend nothing. A document with no neighbour is
        its own, and holds the term: it lends to nobody."""
        holds = np.zeros(self.count, dtype=bool)
        holds[docs] = True
        lending = ~echo[docs]
        for neighbours in (self.previous[docs], self.following[docs]):
            takes = lending & ~holds[neighbours]
            shares[neighbours[takes]] += NEIGHBOUR_SHARE * own[takes]

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """In-scope documents containing ``term`` (ascending) and its exact frequency in each."""
        if not is_cjk(term):
            return self._in_scope(*self._gather("word_postings", word_key(term)))
        if len(term) == 1:
            return self._in_scope(*self._char_postings(term))
        if len(term) == 2:
            return self._bigram_term_postings(term)
        return self._substring_postings(term)

    def _bigram_term_postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """A two-character CJK term is a bigram, and its postings carry the number of
        positions it occurs at: the term frequency itself, except where that count is
        saturated, or where the two characters are the same (哈哈哈 holds 哈哈 at two
        positions but only once without overlap); only those documents are counted."""
        docs, codes = self._in_scope(*self._gather("bigram_postings", bigram_key(term)))
        tfs = bigram_tfs(codes)
        inexact = tfs >= MAX_BIGRAM_TF
        if term[0] == term[1]:
            inexact |= tfs > 1
        if inexact.any():
            tfs = tfs.astype(np.int64)
            tfs[inexact] = self._each(docs[inexact], "count", term.encode())
        return docs, tfs

    def _substring_postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """A CJK term of three or more characters, in the documents holding all its bigrams.

        Where one of its bigrams occurs once, the term occurs at most once, and only
        around that occurrence: :meth:`_seen_at` looks there. Only documents where every
        bigram of the term repeats (or that are in the open segment) are counted."""
        encoded = term.encode()
        within = {term[i : i + 2]: len(term[:i].encode()) for i in reversed(range(len(term) - 1))}
        postings = {b: self._gather("bigram_postings", bigram_key(b)) for b in within}
        docs = self._intersect([bigram_docs for bigram_docs, _ in postings.values()])
        tfs = np.full(len(docs), -1, dtype=np.int64)
        for bigram, (bigram_docs, codes) in postings.items():
            unsettled = np.flatnonzero(tfs < 0)
            if not len(unsettled):
                break
            by_number = np.zeros(self.count, dtype=np.uint8)
            by_number[bigram_docs] = codes
            code = by_number[docs[unsettled]]
            once = bigram_tfs(code) == 1
            settled = unsettled[once]
            starts = bigram_offsets(code[once]).astype(np.int64) - within[bigram]
            tfs[settled] = self._seen_at(docs[settled], starts, encoded)
        counted = tfs < 0
        tfs[counted] = self._each(docs[counted], "count", encoded)
        found = tfs > 0
        return docs[found], tfs[found]

    def _char_postings(self, char: str) -> tuple[np.ndarray, np.ndarray]:
        """A one-character CJK term has no bigram: find its occurrences in the text."""
        pattern = re.compile(re.escape(char.encode()))
        docs: list[np.ndarray] = [_NO_DOCS]
        tfs: list[np.ndarray] = [_NO_DOCS]
        for segment in self.segments:
            positions = np.fromiter(
                (match.start() for match in pattern.finditer(segment.text)), dtype=np.int64
            )
            local = np.searchsorted(segment.text_starts, positions, side="right") - 1
            unique, counts = np.unique(local, return_counts=True)
            docs.append(unique + segment.base)
            tfs.append(counts)
        return np.concatenate(docs), np.concatenate(tfs)

    # --- phrases ---------------------------------------------------------------------------

    def _phrase_matches(self) -> np.ndarray:
        """In-scope documents containing every phrase: the documents holding all of the
        phrases' words (stopwords have none) and bigrams, each then checked with ``find`` in
        the text; every in-scope document where the phrases hold nothing else."""
        lists: list[np.ndarray] = []
        chars: list[str] = []
        for token in dict.fromkeys(t for p in self.query.phrases for t in p.split(" ")):
            if not is_cjk(token):
                if token not in STOPWORDS:
                    lists.append(self._gather("word_postings", word_key(index_term(token)))[0])
            elif len(token) > 1:
                lists += self._bigram_lists(token)
            else:
                chars.append(token)
        if not lists and chars:
            lists.append(self._postings(chars[0])[0])
        numbers = self._intersect(lists) if lists else np.flatnonzero(self.scope)
        for phrase in self.query.phrases:
            numbers = numbers[self._each(numbers, "find", _phrase_pattern(phrase)) >= 0]
        return numbers

    # --- postings and text -----------------------------------------------------------------

    def _gather(self, lookup: str, key: int) -> tuple[np.ndarray, np.ndarray]:
        """A key's postings over the segments searched, as document numbers (ascending),
        with their term frequencies (words) or codes (bigrams)."""
        docs: list[np.ndarray] = [_NO_DOCS]
        values: list[np.ndarray] = [_NO_DOCS]
        for segment in self.segments:
            local, value = getattr(segment, lookup)(key)
            if len(local):
                docs.append(local.astype(np.int64) + segment.base)
                values.append(value)
        return np.concatenate(docs), np.concatenate(values)

    def _bigram_lists(self, token: str) -> list[np.ndarray]:
        """The documents holding each bigram of a CJK token: a superset of its matches."""
        return [
            self._gather("bigram_postings", bigram_key(bigram))[0]
            for bigram in sorted(cjk_bigrams(token))
        ]

    def _intersect(self, lists: list[np.ndarray]) -> np.ndarray:
        """In-scope documents on every one of ``lists`` (each ascending and unique).

        The shortest is cut to the scope and then to each longer one through a boolean
        mask: one pass over each list, no sorting (``np.intersect1d`` sorts)."""
        lists = sorted(lists, key=len)
        numbers = lists[0][self.scope[lists[0]]] if self.filtered else lists[0]
        for docs in lists[1:]:
            if not len(numbers):
                break
            present = np.zeros(self.count, dtype=bool)
            present[docs] = True
            numbers = numbers[present[numbers]]
        return numbers

    def _each(self, numbers: np.ndarray, method: str, pattern: bytes) -> np.ndarray:
        """``text.<method>(pattern, start, end)`` over each document's stretch of its
        segment's text (``count`` or ``find``), looped by ``map`` rather than in Python.

        In batches of :data:`TEXT_BATCH` documents: a ``map`` consumed in C never lets
        go of the interpreter lock, and a phrase over a whole segment's candidates would
        hold the daemon's event loop for milliseconds; between batches it can run."""
        results = np.empty(len(numbers), dtype=np.int64)
        for segment in self.segments:
            lo, hi = np.searchsorted(numbers, (segment.base, segment.base + segment.size))
            starts = segment.text_starts
            look = getattr(segment.text, method)
            for first in range(int(lo), int(hi), TEXT_BATCH):
                last = min(first + TEXT_BATCH, int(hi))
                local = numbers[first:last] - segment.base
                results[first:last] = np.fromiter(
                    map(look, repeat(pattern), starts[local].tolist(), starts[local + 1].tolist()),
                    dtype=np.int64,
                    count=last - first,
                )
        return results

    def _seen_at(self, numbers: np.ndarray, starts: np.ndarray, pattern: bytes) -> np.ndarray:
        """1 where ``pattern`` occurs in the document at an offset ≡ ``starts`` (mod 128),
        0 where it does not, -1 for documents of the open segment (not looked at).

        Every candidate offset of every document is compared at once, byte by byte from
        the end (a byte in the middle of a character rules out most offsets at once)."""
        seen = np.full(len(numbers), -1, dtype=np.int64)
        for segment in self.segments:
            lo, hi = np.searchsorted(numbers, (segment.base, segment.base + segment.size))
            if lo == hi or not isinstance(segment, Segment):
                continue
            local = numbers[lo:hi] - segment.base
            first = segment.text_starts[local] + starts[lo:hi] % OFFSET_MODULUS
            last = segment.text_starts[local + 1] - len(pattern)
            tries = np.maximum((last - first) // OFFSET_MODULUS + 1, 0)
            owner = np.repeat(np.arange(hi - lo), tries)
            step = np.arange(len(owner)) - np.repeat(np.cumsum(tries) - tries, tries)
            offsets = first[owner] + OFFSET_MODULUS * step
            text = np.frombuffer(segment.text, dtype=np.uint8)
            for k in reversed(range(len(pattern))):
                match = text[offsets + k] == pattern[k]
                offsets, owner = offsets[match], owner[match]
            found = np.zeros(hi - lo, dtype=np.int64)
            found[owner] = 1
            seen[lo:hi] = found
        return seen

    # --- ranking ---------------------------------------------------------------------------

    def _top(self, numbers: np.ndarray, final: np.ndarray) -> Ranked:
        """The best ``limit`` by (score, created_at, message id), descending."""
        chosen = self._contenders(numbers, final)
        rows = [
            (
                float(final[i]),
                float(self.created[numbers[i]]),
                self.index.message_id(int(numbers[i])),
                int(numbers[i]),
            )
            for i in chosen.tolist()
        ]
        rows.sort(reverse=True)
        return [(number, score) for score, _, _, number in rows[: self.request.limit]]

    def _contenders(self, numbers: np.ndarray, final: np.ndarray) -> np.ndarray:
        """Positions in ``numbers`` of the top ``limit`` by (score, created_at), plus any
        exact ties at the cut: only those need their message ids decoded to be ordered.
        A phrase-only query scores thousands of documents alike, so this matters."""
        limit = self.request.limit
        if len(final) <= limit:
            return np.arange(len(final))
        kth = np.partition(final, len(final) - limit)[len(final) - limit]
        above = np.flatnonzero(final > kth)
        tied = np.flatnonzero(final == kth)
        wanted = limit - len(above)
        if len(tied) > wanted:
            created = self.created[numbers[tied]]
            newest = np.partition(created, len(tied) - wanted)[len(tied) - wanted]
            tied = tied[created >= newest]
        return np.concatenate((above, tied))


_NO_DOCS = np.zeros(0, dtype=np.int64)


def _phrase_pattern(phrase: str) -> bytes:
    """The phrase as it appears in a segment's text: Latin edges on token boundaries."""
    return (
        ("" if is_cjk_char(phrase[0]) else " ") + phrase + ("" if is_cjk_char(phrase[-1]) else " ")
    ).encode()
