"""The reference scan: recall's rules written as plainly as possible over a list of
documents, for the index to agree with.

What a document matches is decided here from its text alone (a stem among its words, a
CJK term inside one of its runs, a phrase in its words as written, edges as the text
module says), and each term's BM25 is asked of tantivy, the one thing recall delegates,
by a plain query per term whose matches must be exactly those: that is where the index's
CJK bigram phrases and quoted phrases are checked against substrings and words. The
rest is recall's own and is done here by hand: the scope, the neighbours' loans (every
match, by its conversation's order), phrases' flat 2, echoes and the question ×0.1, and
the order (best first, ties to the newer).

Documents get their position in the list as their offset (an index built from a list
reads its hits by it: see :func:`indexed`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import tantivy

from shared.recall.documents import Document
from shared.recall.index import AgentIndex
from shared.recall.ranking import ECHO_FACTOR, NEIGHBOUR_SHARE, PHRASE_BONUS, SearchRequest
from shared.recall.schema import ECHO, offsets_of, open_index, to_document
from shared.recall.text import bigrams, index_terms, is_cjk, parse_query, tokenize


def numbered(documents: Sequence[Document]) -> list[Document]:
    """The documents with their position as their offset."""
    return [dataclasses.replace(d, offset=n) for n, d in enumerate(documents)]


def scratch_index() -> AgentIndex:
    """An empty index in a directory of its own in the test's home (which goes at the
    test's end), removed once the index is garbage: a property test makes hundreds."""
    directory = Path(tempfile.mkdtemp(prefix="index-", dir=os.environ.get("AGENTD_HOME")))
    index = AgentIndex(directory)
    weakref.finalize(index, shutil.rmtree, directory, True)
    return index


def indexed(documents: Sequence[Document]) -> AgentIndex:
    """A scratch index holding ``documents`` (numbered, see :func:`numbered`)."""
    index = scratch_index()
    index.build(numbered(documents))
    return index


def results(
    index: AgentIndex, documents: Sequence[Document], request: SearchRequest
) -> list[tuple[str, float]]:
    """The index's answer as (message id, score), best first."""
    return [(documents[hit.offset].message_id, hit.score) for hit in index.search(request)]


def reference_search(
    documents: Sequence[Document], request: SearchRequest
) -> list[tuple[str, float]]:
    """(message id, score), best first."""
    query = parse_query(request.query)
    if query.empty or request.limit <= 0:
        return []
    documents = numbered(documents)
    tokens = [tokenize(d.text) for d in documents]
    stems = [set(index_terms(d.text)) for d in documents]
    runs = [[t for t in ts if is_cjk(t)] for ts in tokens]
    terms: list[tuple[str, str, str]] = [("words", t, t) for t in query.terms]
    terms += [("tokens", c, c) for c in query.cjk]
    terms += [("tokens", w, w) for w in query.fallback]

    def holds(n: int, field: str, term: str) -> bool:
        if field == "words":
            return term in stems[n]
        if is_cjk(term):
            return any(term in run for run in runs[n])
        return term in tokens[n]

    scores = _bm25(documents, terms, holds)
    scope = [_in_scope(d, request) for d in documents]
    question = _question(documents, request)
    neighbours = _neighbours(documents)
    found = []
    for n, document in enumerate(documents):
        if not scope[n]:
            continue
        text = " ".join(tokens[n])
        if query.phrases:
            if not all(_phrase_matches(text, " ".join(p)) for p in query.phrases):
                continue
        elif not any(holds(n, field, term) for field, term, _ in terms):
            continue
        score = 0.0
        for k, (field, term, _) in enumerate(terms):
            if holds(n, field, term):
                score += scores[k][n]
            elif not document.echo:
                score += NEIGHBOUR_SHARE * sum(
                    scores[k].get(m, 0.0)
                    for m in neighbours[n]
                    if scope[m] and m != question and not documents[m].echo
                )
        score += PHRASE_BONUS * len(query.phrases)
        if document.echo or n == question:
            score *= ECHO_FACTOR
        found.append((score, document.created_at, document.message_id))
    found.sort(key=lambda entry: entry[:2], reverse=True)
    return [(message_id, score) for score, _, message_id in found[: request.limit]]


def _bm25(documents: list[Document], terms: list[tuple[str, str, str]], holds: object) -> list:
    """Per term, its BM25 in each document holding it, asked of tantivy (the main fields
    for ordinary documents, the echo fields for echoes); the documents tantivy finds
    must be exactly those the text says hold it."""
    index = open_index(None)
    writer = index.writer(heap_size=16_000_000, num_threads=1)
    seqs: dict[str, int] = {}
    for document in documents:
        seq = seqs.get(document.conversation_id, 0)
        seqs[document.conversation_id] = seq + 1
        writer.add_document(to_document(document, 0, seq))
    writer.commit()
    index.reload()
    searcher = index.searcher()
    schema = index.schema
    per_term = []
    for field, term, _ in terms:
        scores: dict[int, float] = {}
        for prefix in ("", ECHO):
            query = _term_query(schema, prefix + field, term)
            hits = searcher.search(query, max(1, len(documents)), count=False).hits
            offsets = offsets_of(searcher, [address for _, address in hits])
            scores.update(zip(offsets, (score for score, _ in hits), strict=True))
        expected = {n for n in range(len(documents)) if holds(n, field, term)}  # type: ignore[operator]
        assert set(scores) == expected, f"tantivy's matches of {term!r} are not the text's"
        per_term.append(scores)
    return per_term


def _term_query(schema: tantivy.Schema, field: str, term: str) -> tantivy.Query:
    if not is_cjk(term):
        return tantivy.Query.term_query(schema, field, term)
    if len(term) == 1:
        return tantivy.Query.regex_query(schema, field, term + ".?")
    if len(term) == 2:
        return tantivy.Query.term_query(schema, field, term)
    return tantivy.Query.phrase_query(schema, field, bigrams(term))


def _in_scope(document: Document, request: SearchRequest) -> bool:
    if request.conversation_id is not None and document.conversation_id != request.conversation_id:
        return False
    if request.role is not None and document.role != request.role:
        return False
    if request.since is not None and document.created_at < request.since.timestamp():
        return False
    return request.until is None or document.created_at <= request.until.timestamp()


def _question(documents: list[Document], request: SearchRequest) -> int | None:
    """The asking conversation's newest user message (in log order), if demoted."""
    if request.conversation_id is not None or request.current_conversation_id is None:
        return None
    asking = [
        n
        for n, d in enumerate(documents)
        if d.conversation_id == request.current_conversation_id and d.role == "user"
    ]
    return asking[-1] if asking else None


def _neighbours(documents: list[Document]) -> list[list[int]]:
    """Each document's previous and next document in its own conversation."""
    by_conversation: dict[str, list[int]] = {}
    for n, document in enumerate(documents):
        by_conversation.setdefault(document.conversation_id, []).append(n)
    around: list[list[int]] = [[] for _ in documents]
    for numbers in by_conversation.values():
        for before, after in pairwise(numbers):
            around[before].append(after)
            around[after].append(before)
    return around


def _phrase_matches(normalized: str, phrase: str) -> bool:
    """Does the space-joined token text contain ``phrase``? Latin edges must fall on token
    boundaries; CJK edges may fall inside a CJK token."""
    left = "" if is_cjk(phrase[0]) else " "
    right = "" if is_cjk(phrase[-1]) else " "
    return f"{left}{phrase}{right}" in f" {normalized} "


def assert_agrees(actual: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    """Same scores in the same order (to tantivy's float precision), and the same ids but
    where scores tie that closely (the sums' order may differ), or at the limit's cut."""
    assert len(actual) == len(expected), (actual, expected)
    for (_, a), (_, e) in zip(actual, expected, strict=True):
        assert abs(a - e) <= 1e-5 * max(1.0, abs(e)), (actual, expected)
    groups: dict[float, tuple[list[str], list[str]]] = {}
    for (mine, score), (theirs, _) in zip(actual, expected, strict=True):
        key = next((g for g in groups if abs(g - score) <= 1e-5 * max(1.0, abs(g))), score)
        groups.setdefault(key, ([], []))
        groups[key][0].append(mine)
        groups[key][1].append(theirs)
    last = min(groups) if groups else None
    for key, (mine_ids, their_ids) in groups.items():
        if key != last:
            assert sorted(mine_ids) == sorted(their_ids), (actual, expected)
