"""A message's neighbours in its conversation: the searchable messages just before and
after it.

In a dialogue the words of a fact are often split over turns: a question names the topic,
the reply holds the answer ("What did you research?" / "Adoption agencies"). So ranking
adds to a matching message a damped share of its neighbours' term scores
(:data:`~shared.recall.ranking.NEIGHBOUR_SHARE`). An agent's conversations interleave in
its history, so neighbours are linked within each conversation rather than by document
number: ``previous[n]`` and ``following[n]`` are the document numbers before and after
``n`` in its conversation, or ``n`` itself where there is none.

The links are derived from the index's conversation column, so an index read back from
disk rebuilds them (:meth:`Neighbours.from_conversations`) instead of storing them.
"""

from __future__ import annotations

from array import array

import numpy as np


class Neighbours:
    """The links of every document, extended as documents are appended."""

    def __init__(self) -> None:
        self.previous = array("I")
        self.following = array("I")
        self._last: dict[int, int] = {}
        """The newest document of each conversation (by conversation number)."""

    def append(self, conversation: int) -> None:
        """Link the next document, of conversation number ``conversation``."""
        number = len(self.previous)
        last = self._last.get(conversation, number)
        self.previous.append(last)
        self.following.append(number)
        if last != number:
            self.following[last] = number
        self._last[conversation] = number

    @classmethod
    def from_conversations(
        cls, conversation: np.ndarray, offsets: np.ndarray | None = None
    ) -> Neighbours:
        """The links of documents whose conversation numbers are ``conversation`` (in
        document order): the same as appending them one by one, in one sort. With their
        log ``offsets``, a conversation's documents are linked in log order even where
        their numbers are not (a persisted index reads a damaged segment's documents
        again after the rest)."""
        count = len(conversation)
        if count and int(conversation.max()) < 1 << 16:  # sorted by radix then: ~10x faster
            order = np.argsort(conversation.astype(np.uint16), kind="stable")
        else:
            order = np.argsort(conversation, kind="stable")
        grouped = conversation[order]
        same = grouped[1:] == grouped[:-1]
        if offsets is not None:  # numbers are nearly always in log order: sort only if not
            ordered = offsets[order]
            if not np.all(ordered[1:][same] > ordered[:-1][same]):
                order = np.lexsort((offsets, conversation))
                grouped = conversation[order]
        previous = np.arange(count, dtype=np.uint32)
        following = np.arange(count, dtype=np.uint32)
        previous[order[1:][same]] = order[:-1][same]
        following[order[:-1][same]] = order[1:][same]
        newest = np.append(~same, True) if count else np.zeros(0, dtype=bool)
        links = cls()
        links.previous.frombytes(previous.tobytes())
        links.following.frombytes(following.tobytes())
        links._last = dict(zip(grouped[newest].tolist(), order[newest].tolist(), strict=True))
        return links
