"""Postings for a run of up to 65,536 documents: compact, and cheap to look up.

A segment covers consecutive documents, so a document's number inside it fits in
16 bits. For each key it holds the documents containing it, as a sorted ``uint16`` array
in one CSR layout (``keys`` sorted, ``starts`` into ``docs``) with a parallel array of
per-posting numbers, which keeps a posting at 3 or 4 bytes instead of a Python object.

Two kinds of keys:
- *words*: every non-CJK index term (see :mod:`shared.recall.text`: a stem; stopwords
  have none), with its term frequency (``uint16``);
- *bigrams*: every pair of adjacent characters inside a CJK token, with one byte (see
  :func:`bigram_code`) saying at how many positions it occurs in the document and, when
  that is one, where (the byte offset in the document's text, modulo 128).
  A CJK term matches as a substring, so its candidates are the documents holding all of
  its bigrams. For a two-character term of two different characters the position count
  *is* its frequency (such occurrences cannot overlap). A longer term can occur at most
  once in a document where one of its bigrams occurs once, and only there: a look at
  the few offsets that the code allows settles it. Anything else is counted in the text.

The text is each document's tokens (not its terms) joined by spaces, padded with a space
on both sides and ended by a newline, in one UTF-8 ``bytes``: UTF-8 never matches inside a
character, so ``count`` and ``find`` on it are exact for CJK terms and phrases.

:class:`SegmentBuilder` is the open segment new documents go to; it answers lookups by a
linear scan, which is why it is frozen once it holds :data:`OPEN_SEGMENT_DOCS` documents.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Protocol

import numpy as np
from xxhash import xxh3_64_intdigest

from shared.recall.text import is_cjk

SEGMENT_CAPACITY = 65_536
OPEN_SEGMENT_DOCS = 8_192
"""Documents the open segment takes before it is frozen (its lookups scan linearly)."""
MAX_TF = 65_535
MAX_BIGRAM_TF = 127
"""A bigram count this high only says "at least": the term is counted in the text."""
OFFSET_MODULUS = 128
"""A bigram occurring once records its byte offset in the document modulo this."""
LOOKED_UP = ("text_starts", "words.keys", "words.starts", "bigrams.keys", "bigrams.starts")
"""The arrays of :meth:`Segment.arrays` every search looks into (a binary search of the
keys, each candidate's stretch of text), not just at the postings it finds."""
_ONCE = 0x80
_EMPTY = np.zeros(0, dtype=np.uint16)

Postings = tuple[np.ndarray, np.ndarray]
"""(documents inside the segment, ascending ``uint16``; for each, the term frequency of a
word or the code of a bigram)."""


def word_key(token: str) -> int:
    """A word's key: the same in every process (unlike ``hash``), so persisted postings
    stay findable. XXH3 costs what ``hash`` does (~70 ns a key, ~5 µs a document of ~67
    words and bigrams); the BLAKE2b it replaced cost ~560 ns a key, 37 µs a document."""
    return xxh3_64_intdigest(token.encode())


def bigram_key(bigram: str) -> int:
    """A bigram's key (a byte apart from any word's, as :func:`word_key`)."""
    return xxh3_64_intdigest(b"\x01" + bigram.encode())


class Text(Protocol):
    """What a search reads of a segment's text: ``bytes`` or a mapped file's pages (both
    also expose their bytes through the buffer protocol)."""

    def count(self, sub: bytes, start: int, end: int, /) -> int: ...

    def find(self, sub: bytes, start: int, end: int, /) -> int: ...

    def __len__(self) -> int: ...


def cjk_bigrams(token: str) -> set[str]:
    return {token[i : i + 2] for i in range(len(token) - 1)}


def bigram_code(positions: int, first: int) -> int:
    """One byte per bigram posting: ``0x80 | first % 128`` for a bigram at one position
    (``first``: its byte offset in the document's text), else the number of positions
    (at most :data:`MAX_BIGRAM_TF`)."""
    if positions == 1:
        return _ONCE | first % OFFSET_MODULUS
    return min(positions, MAX_BIGRAM_TF)


def bigram_tfs(codes: np.ndarray) -> np.ndarray:
    """The position counts in bigram codes."""
    return np.where(codes >= _ONCE, 1, codes)


def bigram_offsets(codes: np.ndarray) -> np.ndarray:
    """Byte offsets modulo :data:`OFFSET_MODULUS`, meaningful where the count is one."""
    return codes & (OFFSET_MODULUS - 1)


def _bigram_codes(tokens: list[str]) -> dict[str, int]:
    """The code of each bigram of the document's CJK tokens (offsets as in its text)."""
    bigrams: list[str] = []
    offsets: list[int] = []
    offset = 1  # the text starts with a space
    for token in tokens:
        size = len(token.encode())
        if len(token) > 1 and is_cjk(token):
            bigrams += [token[i : i + 2] for i in range(len(token) - 1)]
            if size == 3 * len(token):  # the usual case: every character is 3 bytes
                offsets += range(offset, offset + size - 3, 3)
            else:
                widths = [len(char.encode()) for char in token[:-1]]
                offsets += accumulate(widths[:-1], initial=offset)
        offset += size + 1
    firsts = dict(zip(reversed(bigrams), reversed(offsets), strict=True))
    return {bigram: bigram_code(n, firsts[bigram]) for bigram, n in Counter(bigrams).items()}


@dataclass(frozen=True)
class _Postings:
    keys: np.ndarray
    starts: np.ndarray
    docs: np.ndarray
    values: np.ndarray

    @classmethod
    def build(cls, keys: np.ndarray, docs: np.ndarray, values: np.ndarray) -> _Postings:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        unique, first = np.unique(keys, return_index=True)
        starts = np.append(first, len(keys)).astype(np.uint32)
        return cls(unique, starts, docs[order], values[order])

    def find(self, key: int) -> Postings:
        index = int(np.searchsorted(self.keys, np.uint64(key)))
        if index < len(self.keys) and int(self.keys[index]) == key:
            found = slice(int(self.starts[index]), int(self.starts[index + 1]))
            return self.docs[found], self.values[found]
        return _EMPTY, _EMPTY

    def expanded_keys(self) -> np.ndarray:
        """The key of every posting (the inverse of the CSR compression), for merging."""
        return np.repeat(self.keys, np.diff(self.starts))

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.starts.nbytes + self.docs.nbytes + self.values.nbytes


class Segment:
    """A frozen segment."""

    def __init__(
        self, base: int, words: _Postings, bigrams: _Postings, text: Text, text_starts: np.ndarray
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

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the segment but its text, by name: what goes to disk."""
        arrays = {"text_starts": self.text_starts}
        for part in ("words", "bigrams"):
            postings: _Postings = getattr(self, part)
            for name in ("keys", "starts", "docs", "values"):
                arrays[f"{part}.{name}"] = getattr(postings, name)
        return arrays

    @classmethod
    def from_arrays(cls, base: int, arrays: Mapping[str, np.ndarray], text: Text) -> Segment:
        """The segment :meth:`arrays` (and its text) describe, sharing their memory."""

        def postings(part: str) -> _Postings:
            return _Postings(*(arrays[f"{part}.{n}"] for n in ("keys", "starts", "docs", "values")))

        return cls(base, postings("words"), postings("bigrams"), text, arrays["text_starts"])


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
        self._bigram_codes = array("B")
        self._text = bytearray()
        self._text_starts = array("q", [0])

    def add(self, tokens: list[str], terms: list[str]) -> None:
        """One document: its tokens (for the text and the bigrams) and its index terms."""
        if self.size >= SEGMENT_CAPACITY:
            raise OverflowError("segment is full")
        local = self.size
        words = Counter(t for t in terms if not is_cjk(t))
        for token, count in words.items():
            self._word_keys.append(word_key(token))
            self._word_docs.append(local)
            self._word_tfs.append(min(count, MAX_TF))
        for bigram, code in _bigram_codes(tokens).items():
            self._bigram_keys.append(bigram_key(bigram))
            self._bigram_docs.append(local)
            self._bigram_codes.append(code)
        self._text += b" " + " ".join(tokens).encode() + b" \n"
        self._text_starts.append(len(self._text))
        self.size += 1

    def word_postings(self, key: int) -> Postings:
        return self._scan(self._word_keys, self._word_docs, self._word_tfs, key)

    def bigram_postings(self, key: int) -> Postings:
        return self._scan(self._bigram_keys, self._bigram_docs, self._bigram_codes, key)

    @staticmethod
    def _scan(keys: array, docs: array, values: array, key: int) -> Postings:
        hits = np.flatnonzero(np.frombuffer(keys, dtype=np.uint64) == np.uint64(key))
        if not len(hits):
            return _EMPTY, _EMPTY
        all_docs = np.frombuffer(docs, dtype=np.uint16)
        all_values = np.frombuffer(values, dtype=np.dtype(values.typecode))
        return all_docs[hits], all_values[hits]

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
            np.array(self._bigram_codes, dtype=np.uint8),
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
            self._bigram_codes,
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
            np.concatenate([p.values for p in postings]),
        )

    starts: list[np.ndarray] = []
    offset = 0
    for segment in segments:
        starts.append(segment.text_starts[:-1] + offset)
        offset += len(segment.text)
    starts.append(np.array([offset], dtype=np.int64))
    text = b"".join(segment.text for segment in segments)
    return Segment(base, merged("words"), merged("bigrams"), text, np.concatenate(starts))
