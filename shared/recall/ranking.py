"""How recall ranks, and the search request and hit types.

``score(d) = bm25(d) + ½·Σ bm25ₜ(n) + 2·|phrases|``, ×0.1 for echoes, where ``bm25`` is
tantivy's (k1 1.2, b 0.75, ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))`` over the
agent's messages, echoes left out, and document lengths in tantivy's one-byte
approximation), and the sum runs over d's neighbours n in its conversation
(:mod:`~shared.recall.lending`) that are in scope and not echoes, and over the terms t
that n holds and d lacks: the context supplies the words a turn leaves out, and a turn
repeating its neighbour's words gains nothing from it (so a query of one term ranks as
plain BM25 does). Only documents holding a term (or, with phrases, every phrase) are
found: a neighbour adds to a match, it makes none. Best first; ties go to the newer
message.

The neighbours' share is what raised recall on long real conversations (LoCoMo, see
``tests/bench/locomo_bench.py``) most: a question and its reply share a topic more often
than words. One parameter, on a broad plateau (0.3 to 0.7 score within 1.5 points).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

PHRASE_BONUS = 2.0
NEIGHBOUR_SHARE = 0.5
"""The part of each neighbour's BM25 a match adds to its own."""
ECHO_FACTOR = 0.1
DEFAULT_LIMIT = 10
CANDIDATES = 20
"""Messages reranked with their neighbours' loans, at least (and the limit's worth and
one more when that is more): with their matching neighbours, LoCoMo's hit@10 is that of
lending to every match (0.716 at 20, 0.711 at 10; see ``tests/bench/locomo_bench.py``)."""


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
