"""BM25 and the search request/hit types shared by the index and its reference scan.

``score = Σ idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/max(avgdl, 1))) + 2·|phrases|``,
×0.1 for echoes, with ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` over the corpus
(the documents in scope, echoes left out). Best first; ties go to the newer message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

K1 = 1.2
B = 0.75
PHRASE_BONUS = 2.0
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


def order_key(score: float, created_at: float, message_id: str) -> tuple[float, float, str]:
    """Sort descending by this: score, then newer, then the later id."""
    return (score, created_at, message_id)
