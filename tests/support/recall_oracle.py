"""The reference scan: recall's ranking written as plainly as possible, over a list of
documents. The index must agree with it on every corpus (ids, order, scores to 1e-9)."""

from __future__ import annotations

from shared.recall.documents import Document
from shared.recall.ranking import (
    ECHO_FACTOR,
    NEIGHBOUR_SHARE,
    PHRASE_BONUS,
    SearchRequest,
    idf,
    order_key,
    term_score,
)
from shared.recall.text import (
    index_terms,
    parse_query,
    phrase_matches,
    term_frequency,
    tokenize,
)


def reference_search(documents: list[Document], request: SearchRequest) -> list[tuple[str, float]]:
    """(message id, score), best first."""
    query = parse_query(request.query)
    if query.empty or request.limit <= 0:
        return []
    tokens = {d.message_id: tokenize(d.text) for d in documents}
    indexed = [d for d in documents if tokens[d.message_id]]
    terms = {d.message_id: index_terms(tokens[d.message_id]) for d in indexed}
    scope = [d for d in indexed if _in_scope(d, request)]
    echoes = {d.message_id for d in scope if d.echo}
    if request.conversation_id is None and request.current_conversation_id is not None:
        asking = [
            d
            for d in scope
            if d.conversation_id == request.current_conversation_id and d.role == "user"
        ]
        if asking:
            echoes.add(max(asking, key=lambda d: (d.created_at, d.message_id)).message_id)
    corpus = [d for d in scope if d.message_id not in echoes] or scope
    if not corpus:
        return []
    avgdl = sum(len(terms[d.message_id]) for d in corpus) / len(corpus)
    df = {
        t: sum(1 for d in corpus if term_frequency(terms[d.message_id], t) > 0) for t in query.terms
    }

    def bm25(document: Document, among: tuple[str, ...] = query.terms) -> float:
        words = terms[document.message_id]
        return sum(
            term_score(
                idf(len(corpus), df[t]),
                term_frequency(words, t),
                len(terms[document.message_id]),
                avgdl,
            )
            for t in among
            if term_frequency(words, t) > 0
        )

    in_scope = {d.message_id for d in scope}
    results = []
    for document in scope:
        normalized = " ".join(tokens[document.message_id])
        if query.phrases:
            if not all(phrase_matches(normalized, p) for p in query.phrases):
                continue
        elif not any(term_frequency(terms[document.message_id], t) > 0 for t in query.terms):
            continue
        score = bm25(document)
        lacking = tuple(
            t for t in query.terms if term_frequency(terms[document.message_id], t) == 0
        )
        for neighbour in _neighbours(indexed, document):
            if neighbour.message_id in in_scope and neighbour.message_id not in echoes:
                score += NEIGHBOUR_SHARE * bm25(neighbour, lacking)
        score += PHRASE_BONUS * len(query.phrases)
        if document.message_id in echoes:
            score *= ECHO_FACTOR
        results.append((document, score))
    results.sort(key=lambda r: order_key(r[1], r[0].created_at, r[0].message_id), reverse=True)
    return [(d.message_id, score) for d, score in results[: request.limit]]


def _neighbours(indexed: list[Document], document: Document) -> list[Document]:
    """The documents just before and after ``document`` in its conversation."""
    same = [d for d in indexed if d.conversation_id == document.conversation_id]
    at = next(i for i, d in enumerate(same) if d is document)
    return same[max(at - 1, 0) : at] + same[at + 1 : at + 2]


def _in_scope(document: Document, request: SearchRequest) -> bool:
    if request.conversation_id is not None and document.conversation_id != request.conversation_id:
        return False
    if request.role is not None and document.role != request.role:
        return False
    if request.since is not None and document.created_at < request.since.timestamp():
        return False
    return not (request.until is not None and document.created_at > request.until.timestamp())
