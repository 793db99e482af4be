"""Postings for a run of up to 65,536 documents: compact, and cheap to look up.

A segment covers consecutive documents, so a document's number inside it fits in
16 bits. For each key it holds the documents containing it, as a sorted ``uint16`` array
in one CSR layout (``keys`` sorted, ``starts`` into ``docs``), which keeps the postings at
2 bytes each (plus 2 for a word's term frequency) instead of a Python object each.

Two kinds of keys:
- *words*: every non-CJK token, with its term frequency;
- *bigrams*: every pair of adjacent characters inside a CJK token, without frequency.
  A CJK term matches as a substring, so its candidates are the documents holding all of
  its bigrams; its exact frequency is then counted in the segment's text.

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
_EMPTY = np.zeros(0, dtype=np.uint16)


def word_key(token: str) -> int:
    return hash(token) & 0xFFFF_FFFF_FFFF_FFFF


def bigram_key(bigram: str) -> int:
    return hash("\x01" + bigram) & 0xFFFF_FFFF_FFFF_FFFF


def cjk_bigrams(token: str) -> set[str]:
    return {token[i : i + 2] for i in range(len(token) - 1)}


@dataclass(frozen=True)
class _Postings:
    keys: np.ndarray
    starts: np.ndarray
    docs: np.ndarray
    tfs: np.ndarray | None

    @classmethod
    def build(cls, keys: np.ndarray, docs: np.ndarray, tfs: np.ndarray | None) -> _Postings:
        order = np.argsort(keys, kind="stable")
        keys, docs = keys[order], docs[order]
        unique, first = np.unique(keys, return_index=True)
        starts = np.append(first, len(keys)).astype(np.int64)
        return cls(unique, starts, docs, tfs[order] if tfs is not None else None)

    def find(self, key: int) -> slice | None:
        index = int(np.searchsorted(self.keys, np.uint64(key)))
        if index < len(self.keys) and int(self.keys[index]) == key:
            return slice(int(self.starts[index]), int(self.starts[index + 1]))
        return None

    @property
    def nbytes(self) -> int:
        extra = self.tfs.nbytes if self.tfs is not None else 0
        return self.keys.nbytes + self.starts.nbytes + self.docs.nbytes + extra


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

    def word_postings(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        found = self.words.find(key)
        if found is None:
            return _EMPTY, _EMPTY
        assert self.words.tfs is not None
        return self.words.docs[found], self.words.tfs[found]

    def bigram_docs(self, key: int) -> np.ndarray:
        found = self.bigrams.find(key)
        return _EMPTY if found is None else self.bigrams.docs[found]

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
        bigrams: set[str] = set()
        for token in tokens:
            if len(token) > 1 and is_cjk(token):
                bigrams |= cjk_bigrams(token)
        for bigram in bigrams:
            self._bigram_keys.append(bigram_key(bigram))
            self._bigram_docs.append(local)
        self._text += b" " + " ".join(tokens).encode() + b" \n"
        self._text_starts.append(len(self._text))
        self.size += 1

    def word_postings(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        keys = np.frombuffer(self._word_keys, dtype=np.uint64)
        hits = np.flatnonzero(keys == np.uint64(key))
        if not len(hits):
            return _EMPTY, _EMPTY
        docs = np.frombuffer(self._word_docs, dtype=np.uint16)[hits]
        tfs = np.frombuffer(self._word_tfs, dtype=np.uint16)[hits]
        return docs, tfs

    def bigram_docs(self, key: int) -> np.ndarray:
        keys = np.frombuffer(self._bigram_keys, dtype=np.uint64)
        hits = np.flatnonzero(keys == np.uint64(key))
        return np.frombuffer(self._bigram_docs, dtype=np.uint16)[hits] if len(hits) else _EMPTY

    @property
    def text(self) -> bytearray:
        """The live text buffer (not a copy): read it, don't keep it past a search."""
        return self._text

    @property
    def text_starts(self) -> np.ndarray:
        return np.frombuffer(self._text_starts, dtype=np.int64)

    def freeze(self) -> Segment:
        def arr(values: array, dtype: type) -> np.ndarray:
            return np.array(values, dtype=dtype)

        words = _Postings.build(
            arr(self._word_keys, np.uint64),
            arr(self._word_docs, np.uint16),
            arr(self._word_tfs, np.uint16),
        )
        bigrams = _Postings.build(
            arr(self._bigram_keys, np.uint64), arr(self._bigram_docs, np.uint16), None
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
            self._text_starts,
        )
        return sum(a.itemsize * len(a) for a in arrays) + len(self._text)


def merge(segments: list[Segment]) -> Segment:
    """One segment holding the documents of consecutive ``segments`` (≤ 65,536 in all)."""
    base = segments[0].base
    word_keys, word_docs, word_tfs, bigram_keys, bigram_docs, starts = [], [], [], [], [], []
    text_parts: list[bytes] = []
    offset = 0
    for segment in segments:
        shift = segment.base - base
        for postings, keys, docs in (
            (segment.words, word_keys, word_docs),
            (segment.bigrams, bigram_keys, bigram_docs),
        ):
            counts = np.diff(postings.starts)
            keys.append(np.repeat(postings.keys, counts))
            docs.append(postings.docs.astype(np.uint32) + shift)
        assert segment.words.tfs is not None
        word_tfs.append(segment.words.tfs)
        starts.append(segment.text_starts[:-1] + offset)
        text_parts.append(segment.text)
        offset += len(segment.text)
    starts.append(np.array([offset], dtype=np.int64))
    words = _Postings.build(
        np.concatenate(word_keys),
        np.concatenate(word_docs).astype(np.uint16),
        np.concatenate(word_tfs),
    )
    bigrams = _Postings.build(
        np.concatenate(bigram_keys), np.concatenate(bigram_docs).astype(np.uint16), None
    )
    return Segment(base, words, bigrams, b"".join(text_parts), np.concatenate(starts))
