"""BM25 and the search request/hit types shared by the index and its reference scan.

``bm25(d) = Σ idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/max(avgdl, 1)))`` over the
query's terms, with ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` over the corpus (the
documents in scope, echoes left out) and ``dl`` a document's number of index terms;
``score(d) = bm25(d) + ½·Σ bm25ₜ(n) + 2·|phrases|``, ×0.1 for echoes, where the sum
runs over d's neighbours n in its conversation (:mod:`~shared.recall.dialogue`) that are
in scope and not echoes, and over the terms t that n holds and d lacks: the context
supplies the words a turn leaves out, and a turn repeating its neighbour's words gains
nothing from it (so a query of one term ranks as plain BM25 does).
Only documents holding a term (or, with phrases, every phrase) are found: a neighbour
adds to a match, it makes none. Best first; ties go to the newer message.

The neighbours' share is what raised recall on long real conversations (LoCoMo, see
``tests/bench/locomo_bench.py``) most: a question and its reply share a topic more often
than words. One parameter, on a broad plateau (0.3 to 0.7 score within 1.5 points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

K1 = 1.2
B = 0.75
PHRASE_BONUS = 2.0
NEIGHBOUR_SHARE = 0.5
"""The part of each neighbour's BM25 a match adds to its own."""
ECHO_FACTOR = 0.1
DEFAULT_LIMIT = 10


def idf(corpus_size: int, document_frequency: int) -> float:
    return math.log(1 + (corpus_size - document_frequency + 0.5) / (document_frequency + 0.5))


def term_score(idf_value: float, tf: int, dl: int, avgdl: float) -> float:
    """One term's BM25 contribution (the vectorised index computes the same expression)."""
    return idf_value * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / max(avgdl, 1.0)))


@dataclass(frozen=True)
class SearchRequest:
    query: str
    limit: int = DEFAULT_LIMIT
    conversation_id: str | None = None
    """Search only this conversation (and demote nothing: the search is literal)."""
    role: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    current_conversation_id: str | None = None
    """The conversation asking, if any: its newest user message is the question being
    recalled, so it is demoted like an echo (only when ``conversation_id`` is None)."""


@dataclass(frozen=True)
class Hit:
    message_id: str
    conversation_id: str
    role: str
    created_at: float
    score: float
    text: str


@dataclass(frozen=True)
class Found:
    """A search's hits, and whether they can be trusted to be all there is."""

    hits: list[Hit]
    incomplete: str | None = None
    """Why some messages may be missing, while the index is catching up on the logs or
    rebuilding (``index catching up: 12,000 messages not searchable yet``); None when
    every message the logs held when the search began was searched. Shown with the hits,
    so neither the model nor the user takes a partial answer for a whole one."""


def order_key(score: float, created_at: float, message_id: str) -> tuple[float, float, str]:
    """Sort descending by this: score, then newer, then the later id."""
    return (score, created_at, message_id)
