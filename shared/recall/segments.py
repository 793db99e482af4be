"""Postings for a run of up to 65,536 documents: compact, and cheap to look up.

A segment covers consecutive documents, so a document's number inside it fits in
16 bits. For each key it holds the documents containing it, as a sorted ``uint16`` array
in one CSR layout (``keys`` sorted, ``starts`` into ``docs``) with a parallel array of
frequencies, which keeps a posting at 3 or 4 bytes instead of a Python object.

Two kinds of keys:
- *words*: every non-CJK token, with its term frequency (``uint16``);
- *bigrams*: every pair of adjacent characters inside a CJK token, with the number of
  positions it occurs at in the document (``uint8``, saturating at :data:`MAX_BIGRAM_TF`).
  A CJK term matches as a substring, so its candidates are the documents holding all of
  its bigrams. For a two-character term of two different characters that count *is* its
  frequency (such occurrences cannot overlap); any other CJK term, or a saturated count,
  is counted exactly in the segment's text.

The text is each document's tokens joined by spaces, padded with a space on both sides
and ended by a newline, in one UTF-8 ``bytes``: UTF-8 never matches inside a character, so
``count`` and ``find`` on it are exact for terms and phrases.

:class:`SegmentBuilder` is the open segment new documents go to; it answers lookups by a
linear scan, which is why it is frozen once it holds :data:`OPEN_SEGMENT_DOCS` documents.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass

import numpy as np

from shared.recall.text import is_cjk

SEGMENT_CAPACITY = 65_536
OPEN_SEGMENT_DOCS = 8_192
"""Documents the open segment takes before it is frozen (its lookups scan linearly)."""
MAX_TF = 65_535
MAX_BIGRAM_TF = 255
"""A bigram count this high only says "at least": the term is counted in the text."""
_EMPTY = np.zeros(0, dtype=np.uint16)

Postings = tuple[np.ndarray, np.ndarray]
"""(documents inside the segment, ascending ``uint16``; their frequencies)."""


def word_key(token: str) -> int:
    return hash(token) & 0xFFFF_FFFF_FFFF_FFFF


def bigram_key(bigram: str) -> int:
    return hash("\x01" + bigram) & 0xFFFF_FFFF_FFFF_FFFF


def cjk_bigrams(token: str) -> set[str]:
    return {token[i : i + 2] for i in range(len(token) - 1)}


def _bigram_counts(tokens: list[str]) -> Counter[str]:
    """Positions each bigram occurs at, over the document's CJK tokens."""
    return Counter(
        token[i : i + 2]
        for token in tokens
        if len(token) > 1 and is_cjk(token)
        for i in range(len(token) - 1)
    )


@dataclass(frozen=True)
class _Postings:
    keys: np.ndarray
    starts: np.ndarray
    docs: np.ndarray
    tfs: np.ndarray

    @classmethod
    def build(cls, keys: np.ndarray, docs: np.ndarray, tfs: np.ndarray) -> _Postings:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        unique, first = np.unique(keys, return_index=True)
        starts = np.append(first, len(keys)).astype(np.int64)
        return cls(unique, starts, docs[order], tfs[order])

    def find(self, key: int) -> Postings:
        index = int(np.searchsorted(self.keys, np.uint64(key)))
        if index < len(self.keys) and int(self.keys[index]) == key:
            found = slice(int(self.starts[index]), int(self.starts[index + 1]))
            return self.docs[found], self.tfs[found]
        return _EMPTY, _EMPTY

    def expanded_keys(self) -> np.ndarray:
        """The key of every posting (the inverse of the CSR compression), for merging."""
        return np.repeat(self.keys, np.diff(self.starts))

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.starts.nbytes + self.docs.nbytes + self.tfs.nbytes


class Segment:
    """A frozen segment."""

    def __init__(
        self, base: int, words: _Postings, bigrams: _Postings, text: bytes, text_starts: np.ndarray
    ) -> None:
        self.base = base
        self.size = len(text_starts) - 1
        self.words = words
        self.bigrams = bigrams
        self.text = text
        self.text_starts = text_starts

    def word_postings(self, key: int) -> Postings:
        return self.words.find(key)

    def bigram_postings(self, key: int) -> Postings:
        return self.bigrams.find(key)

    @property
    def nbytes(self) -> int:
        return self.words.nbytes + self.bigrams.nbytes + len(self.text) + self.text_starts.nbytes


class SegmentBuilder:
    """The open segment: appends are cheap, lookups scan; freeze it to a :class:`Segment`."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.size = 0
        self._word_keys = array("Q")
        self._word_docs = array("H")
        self._word_tfs = array("H")
        self._bigram_keys = array("Q")
        self._bigram_docs = array("H")
        self._bigram_tfs = array("B")
        self._text = bytearray()
        self._text_starts = array("q", [0])

    def add(self, tokens: list[str]) -> None:
        if self.size >= SEGMENT_CAPACITY:
            raise OverflowError("segment is full")
        local = self.size
        words = Counter(t for t in tokens if not is_cjk(t))
        for token, count in words.items():
            self._word_keys.append(word_key(token))
            self._word_docs.append(local)
            self._word_tfs.append(min(count, MAX_TF))
        for bigram, count in _bigram_counts(tokens).items():
            self._bigram_keys.append(bigram_key(bigram))
            self._bigram_docs.append(local)
            self._bigram_tfs.append(min(count, MAX_BIGRAM_TF))
        self._text += b" " + " ".join(tokens).encode() + b" \n"
        self._text_starts.append(len(self._text))
        self.size += 1

    def word_postings(self, key: int) -> Postings:
        return self._scan(self._word_keys, self._word_docs, self._word_tfs, key)

    def bigram_postings(self, key: int) -> Postings:
        return self._scan(self._bigram_keys, self._bigram_docs, self._bigram_tfs, key)

    @staticmethod
    def _scan(keys: array, docs: array, tfs: array, key: int) -> Postings:
        hits = np.flatnonzero(np.frombuffer(keys, dtype=np.uint64) == np.uint64(key))
        if not len(hits):
            return _EMPTY, _EMPTY
        all_docs = np.frombuffer(docs, dtype=np.uint16)
        all_tfs = np.frombuffer(tfs, dtype=np.dtype(tfs.typecode))
        return all_docs[hits], all_tfs[hits]

    @property
    def text(self) -> bytearray:
        """The live text buffer (not a copy): read it, don't keep it past a search."""
        return self._text

    @property
    def text_starts(self) -> np.ndarray:
        return np.frombuffer(self._text_starts, dtype=np.int64)

    def freeze(self) -> Segment:
        words = _Postings.build(
            np.array(self._word_keys, dtype=np.uint64),
            np.array(self._word_docs, dtype=np.uint16),
            np.array(self._word_tfs, dtype=np.uint16),
        )
        bigrams = _Postings.build(
            np.array(self._bigram_keys, dtype=np.uint64),
            np.array(self._bigram_docs, dtype=np.uint16),
            np.array(self._bigram_tfs, dtype=np.uint8),
        )
        return Segment(
            self.base, words, bigrams, bytes(self._text), np.array(self._text_starts, np.int64)
        )

    @property
    def nbytes(self) -> int:
        arrays = (
            self._word_keys,
            self._word_docs,
            self._word_tfs,
            self._bigram_keys,
            self._bigram_docs,
            self._bigram_tfs,
            self._text_starts,
        )
        return sum(a.itemsize * len(a) for a in arrays) + len(self._text)


def merge(segments: list[Segment]) -> Segment:
    """One segment holding the documents of consecutive ``segments`` (≤ 65,536 in all)."""
    base = segments[0].base

    def merged(part: str) -> _Postings:
        postings: list[_Postings] = [getattr(segment, part) for segment in segments]
        return _Postings.build(
            np.concatenate([p.expanded_keys() for p in postings]),
            np.concatenate(
                [p.docs + np.uint16(s.base - base) for p, s in zip(postings, segments, strict=True)]
            ),
            np.concatenate([p.tfs for p in postings]),
        )

    starts: list[np.ndarray] = []
    offset = 0
    for segment in segments:
        starts.append(segment.text_starts[:-1] + offset)
        offset += len(segment.text)
    starts.append(np.array([offset], dtype=np.int64))
    text = b"".join(segment.text for segment in segments)
    return Segment(base, merged("words"), merged("bigrams"), text, np.concatenate(starts))
