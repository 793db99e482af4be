"""What a message's neighbours in its conversation lend it: the dialogue-aware part of
ranking.

In a dialogue the words of a fact are often split over turns: a question names the topic,
the reply holds the answer ("What did you research?" / "Adoption agencies"). So a match
also gets half (:data:`~shared.recall.ranking.NEIGHBOUR_SHARE`) of the BM25 its
neighbours (the messages just before and after it in its conversation, if they are in
the search's scope and not echoes) earn with the query terms it lacks itself: the
context supplies the words a turn leaves out, and a turn repeating its neighbour's words
gains nothing from it, so a query of one term ranks exactly as BM25 does. A neighbour
adds to a match; it makes none.

tantivy ranks by BM25 alone, so this is a rerank of its best candidates
(:data:`~shared.recall.ranking.CANDIDATES` of them, by their own BM25) and of their
neighbours that match too, which are the messages lending most often lifts: for each
query term, one search restricted to those messages and theirs (by the blocks holding
them, see ``block`` in :mod:`~shared.recall.schema`) gives each of them its BM25 for that
term, from which every candidate's loan is summed. On LoCoMo
(``tests/bench/locomo_bench.py``) this ranks as well as lending to every match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tantivy

from shared.recall.queries import in_blocks, restricted
from shared.recall.ranking import NEIGHBOUR_SHARE
from shared.recall.schema import BLOCK_BITS, block_of, keys_of, place

REACH = 2
"""Keys either side of a candidate whose scores are read: its neighbours, and theirs (a
neighbour that matches is a candidate too, and the one beyond it lends to it)."""


def lend(
    searcher: tantivy.Searcher,
    schema: tantivy.Schema,
    hits: Sequence[tuple[float, tantivy.DocAddress]],
    terms: Sequence[tantivy.Query],
    in_scope: Callable[[list[tantivy.DocAddress]], list[bool]],
    lends_nothing: tuple[int, int] | None,
    with_neighbours: bool,
) -> list[tuple[float, tantivy.DocAddress]]:
    """The candidates ``hits`` (the best by their own score) and, ``with_neighbours``,
    their neighbours that match, each with its score and its loan. ``lends_nothing``:
    the place (:func:`~shared.recall.schema.place`) of a message (the question being
    asked) that lends to no one. Without neighbours where the query holds phrases: a
    neighbour must hold them too, and the searches by term do not ask. ``in_scope`` tells
    which messages the search's role and dates let in (checked on the few messages
    found, rather than by each search: a date range is a scan of a column)."""
    addresses = [address for _, address in hits]
    keys = keys_of(searcher, addresses)
    steps = range(-REACH, REACH + 1)
    wanted = {k + step for k in keys for step in steps if k + step >= 0}
    blocks = {block_of(key) for key in wanted}
    among = in_blocks(schema, blocks)  # a few messages more, dropped below
    room = len(blocks) << BLOCK_BITS
    scores: list[dict[int, float]] = []
    found: dict[int, tantivy.DocAddress] = dict(zip(keys, addresses, strict=True))
    for term in terms:
        matched = searcher.search(restricted(term, among, []), room, count=False).hits
        matched_keys = keys_of(searcher, [address for _, address in matched])
        near = [
            (key, score, address)
            for key, (score, address) in zip(matched_keys, matched, strict=True)
            if key in wanted  # the blocks hold a few messages farther off
        ]
        scores.append({key: score for key, score, _ in near})
        found.update((key, address) for key, _, address in near)
    extra = [key for key in found if key not in set(keys)]
    for key, inside in zip(extra, in_scope([found[key] for key in extra]), strict=True):
        if not inside:
            del found[key]
            for term_scores in scores:
                term_scores.pop(key, None)
    silent = next((k for k, a in found.items() if place(a) == lends_nothing), None)
    own = dict(zip(keys, (score for score, _ in hits), strict=True))
    candidates = set(own)
    if with_neighbours:
        for key in keys:
            candidates.update(k for k in (key - 1, key + 1) if k in found and k not in own)
    ranked = []
    for key in candidates:
        score = own.get(key)
        if score is None:  # a neighbour: its own score, term by term
            score = sum(term_scores.get(key, 0.0) for term_scores in scores)
        for term_scores in scores:
            if key not in term_scores:
                loan = sum(
                    term_scores.get(neighbour, 0.0)
                    for neighbour in (key - 1, key + 1)
                    if neighbour != silent
                )
                score += NEIGHBOUR_SHARE * loan
        ranked.append((score, found[key]))
    return ranked
