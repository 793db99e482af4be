"""One search over an agent's index: tantivy's best matches, reranked by recall's rules.

The steps, each a tantivy search over the snapshot the index had when it began:

1. the best matches among ordinary messages, by BM25 and phrases (a query of phrases
   alone scores every match alike: the newest come first);
2. with two terms or more (or a term and a phrase), the neighbours' loans
   (:mod:`shared.recall.lending`);
3. the best matching echoes, from their own fields, ×0.1;
4. the question being asked (the asking conversation's newest user message), ×0.1 and
   lending nothing;

then best first, ties to the newer message (tantivy cuts its best at
:data:`~shared.recall.ranking.CANDIDATES` whatever the limit, so that ties at the limit
are settled by date, as far as they reach). A hit is where its message's line is (its
conversation and offset, read from fast fields for all the hits at once); nothing reads
the text.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import tantivy

from shared.recall.lending import lend
from shared.recall.queries import combine, filters, phrase_clauses, term_clauses
from shared.recall.ranking import CANDIDATES, ECHO_FACTOR, PHRASE_BONUS, SearchRequest
from shared.recall.schema import ECHO, ROLE_CODE, fast_ints, microseconds, offsets_of, place
from shared.recall.text import Query

Scored = tuple[float, tantivy.DocAddress]


@dataclass(frozen=True, slots=True)
class Ranked:
    """A hit: where its message is, and its score."""

    conversation: int
    """The conversation's hash (see :func:`~shared.recall.schema.conversation_hash`)."""
    offset: int
    """Where the message's line starts in the conversation's log (its role, date and text
    are read there)."""
    score: float


def run(
    searcher: tantivy.Searcher,
    schema: tantivy.Schema,
    query: Query,
    request: SearchRequest,
    conversation: int | None,
    asking: tantivy.DocAddress | None,
) -> list[Ranked]:
    """``conversation``: the hash of the request's conversation, if it names one;
    ``asking``: the question being asked, if any (in this searcher)."""
    scope = filters(schema, request, conversation)
    limit = request.limit + (asking is not None)
    candidates: list[Scored] = []
    for prefix in ("", ECHO):
        terms = term_clauses(schema, query, prefix)
        phrases = phrase_clauses(schema, query, prefix)
        combined = combine(terms, phrases, scope)
        if not terms:  # phrases alone: every match scores the same
            found = searcher.search(combined, limit, count=False, order_by_field="created").hits
            hits = [(PHRASE_BONUS * len(phrases), address) for _, address in found]
        elif prefix or (len(terms) == 1 and not phrases):  # every match holds the term
            hits = searcher.search(combined, max(CANDIDATES, limit), count=False).hits
        else:
            best = searcher.search(combined, max(CANDIDATES, limit), count=False).hits
            silent = None if asking is None else place(asking)
            in_scope = functools.partial(_in_scope, searcher, request)
            hits = best and lend(searcher, schema, best, terms, in_scope, silent, not phrases)
        question = place(asking) if asking is not None and not prefix else None
        candidates += [
            (score * ECHO_FACTOR if prefix or place(a) == question else score, a)
            for score, a in hits
        ]
    return _best(searcher, candidates, request.limit)


def _in_scope(
    searcher: tantivy.Searcher, request: SearchRequest, addresses: list[tantivy.DocAddress]
) -> list[bool]:
    """Which of these messages (of the request's conversation, if it names one: they are
    neighbours of its matches) the request's role and dates let in."""
    inside = [True] * len(addresses)
    if request.role is not None:
        roles = fast_ints(searcher, "role", addresses)
        wanted = ROLE_CODE[request.role]
        inside = [ok and role == wanted for ok, role in zip(inside, roles, strict=True)]
    if request.since is not None or request.until is not None:
        since = microseconds(request.since.timestamp()) if request.since else 0
        until = microseconds(request.until.timestamp()) if request.until else 1 << 64
        dates = fast_ints(searcher, "created", addresses)
        inside = [ok and since <= at <= until for ok, at in zip(inside, dates, strict=True)]
    return inside


def _best(searcher: tantivy.Searcher, scored: list[Scored], limit: int) -> list[Ranked]:
    if len({score for score, _ in scored}) < len(scored):  # ties: the newer first
        created = fast_ints(searcher, "created", [address for _, address in scored])
    else:  # (read only then: a fast field read costs what a small search does)
        created = [0] * len(scored)
    order = sorted(
        zip(scored, created, strict=True),
        key=lambda entry: (entry[0][0], entry[1], place(entry[0][1])),
        reverse=True,
    )[:limit]
    best = [address for (_, address), _ in order]
    conversations = fast_ints(searcher, "conv", best)
    offsets = offsets_of(searcher, best)
    return [
        Ranked(conversation, offset, score)
        for ((score, _), _), conversation, offset in zip(order, conversations, offsets, strict=True)
    ]
