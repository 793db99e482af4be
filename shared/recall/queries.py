"""A parsed query (:class:`~shared.recall.text.Query`) as tantivy queries.

- A stem is a term of the words field, scored by tantivy's BM25 (k1 1.2, b 0.75).
- A CJK term is a phrase of its bigrams in the tokens field (a substring of a run, never
  across runs), scored by BM25 over the times it occurs; a two-character one is a single
  bigram, and a one-character one is that character as a bigram's first or a run's last
  (a regular expression over the terms), which matches at a flat score of 1.
- A quoted phrase is a phrase of the tokens, its CJK runs spelled out: a run inside the
  phrase must be a whole run of the message, a run first in the phrase may begin inside
  one, a run last in it may end inside one (the tokens field's lone last character marks
  where a run ends). A phrase is required and adds a flat 2.
- The filters (conversation, role, dates) are required and add nothing.

Terms are alternatives: without phrases a message must hold at least one of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

import tantivy

from shared.recall.ranking import PHRASE_BONUS, SearchRequest
from shared.recall.schema import ROLE_CODE, microseconds
from shared.recall.text import Query, bigrams, is_cjk

Occur = tantivy.Occur
NEVER = 0
EVER = (1 << 64) - 1


def term_clauses(schema: tantivy.Schema, query: Query, prefix: str) -> list[tantivy.Query]:
    """One query per term of ``query``, in the fields named with ``prefix``."""
    words, tokens = prefix + "words", prefix + "tokens"
    clauses = [tantivy.Query.term_query(schema, words, term) for term in query.terms]
    clauses += [_cjk(schema, tokens, run) for run in query.cjk]
    clauses += [tantivy.Query.term_query(schema, tokens, word) for word in query.fallback]
    return clauses


def phrase_clauses(schema: tantivy.Schema, query: Query, prefix: str) -> list[tantivy.Query]:
    return [
        tantivy.Query.const_score_query(_phrase(schema, prefix + "tokens", phrase), PHRASE_BONUS)
        for phrase in query.phrases
    ]


def _cjk(schema: tantivy.Schema, field: str, run: str) -> tantivy.Query:
    if len(run) == 1:
        return tantivy.Query.regex_query(schema, field, re.escape(run) + ".?")
    if len(run) == 2:
        return tantivy.Query.term_query(schema, field, run)
    pairs: list[str | tuple[int, str]] = [*bigrams(run)]
    return tantivy.Query.phrase_query(schema, field, pairs)


def _phrase(schema: tantivy.Schema, field: str, words: Sequence[str]) -> tantivy.Query:
    """The tokens a phrase must find at consecutive positions (see the module)."""
    if len(words) == 1:
        word = words[0]
        return _cjk(schema, field, word) if is_cjk(word) else _term(schema, field, word)
    steps: list[tuple[bool, str]] = []  # (a regular expression?, the term or pattern)
    for n, word in enumerate(words):
        last = n == len(words) - 1
        if not is_cjk(word):
            steps.append((False, word))
        elif len(word) == 1:  # a run of its own, or (last) the start of one
            steps.append((True, re.escape(word) + ".?") if last else (False, word))
        else:
            steps += [(False, pair) for pair in bigrams(word)]
            if not last:
                steps.append((False, word[-1]))
    if any(pattern for pattern, _ in steps):
        patterns: list[str | tuple[int, str]] = [
            text if pattern else re.escape(text) for pattern, text in steps
        ]
        return tantivy.Query.regex_phrase_query(schema, field, patterns)
    texts: list[str | tuple[int, str]] = [text for _, text in steps]
    return tantivy.Query.phrase_query(schema, field, texts)


def _term(schema: tantivy.Schema, field: str, text: str) -> tantivy.Query:
    return tantivy.Query.term_query(schema, field, text)


def filters(
    schema: tantivy.Schema, request: SearchRequest, conversation: int | None
) -> list[tantivy.Query]:
    """The request's scope, each a required clause that adds nothing to a score."""
    found = []
    if conversation is not None:
        found.append(tantivy.Query.term_query(schema, "conv", conversation))
    if request.role is not None:
        found.append(tantivy.Query.term_query(schema, "role", ROLE_CODE[request.role]))
    if request.since is not None or request.until is not None:
        found.append(
            tantivy.Query.range_query(
                schema,
                "created",
                tantivy.FieldType.Unsigned,
                _microseconds(request.since, NEVER),
                _microseconds(request.until, EVER),
            )
        )
    return [tantivy.Query.const_score_query(query, 0.0) for query in found]


def _microseconds(moment: datetime | None, default: int) -> int:
    return default if moment is None else microseconds(moment.timestamp())


def combine(
    terms: list[tantivy.Query], phrases: list[tantivy.Query], scope: list[tantivy.Query]
) -> tantivy.Query:
    """Phrases and scope required, terms alternatives (one required when no phrase)."""
    if not phrases:
        either = terms[0] if len(terms) == 1 else _any(terms)
        if not scope:
            return either
        return tantivy.Query.boolean_query([(Occur.Must, q) for q in (either, *scope)])
    clauses = [(Occur.Must, q) for q in (*phrases, *scope)]
    clauses += [(Occur.Should, q) for q in terms]
    return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)


def _any(queries: list[tantivy.Query]) -> tantivy.Query:
    return tantivy.Query.boolean_query([(Occur.Should, q) for q in queries])


def restricted(
    clause: tantivy.Query, keys: tantivy.Query, scope: list[tantivy.Query]
) -> tantivy.Query:
    """``clause`` over only the messages ``keys`` matches (and in scope)."""
    return tantivy.Query.boolean_query([(Occur.Must, q) for q in (clause, keys, *scope)])


def in_blocks(schema: tantivy.Schema, blocks: Iterable[int]) -> tantivy.Query:
    """The messages of these blocks (see ``block`` in :mod:`~shared.recall.schema`): one
    term query per block, a posting list of at most eight, so that a search restricted to
    them steps through a few hundred documents. A range of the keys is not a seek but a
    bit set of the whole index per range (3–15 ms at a million messages for twenty
    ranges), and a term set query builds one too."""
    return tantivy.Query.const_score_query(
        _any([tantivy.Query.term_query(schema, "block", block) for block in blocks]), 0.0
    )
