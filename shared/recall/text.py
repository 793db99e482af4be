"""The text rules recall matches by: how a message is cut into what the index holds, and
how a query is read.

Words are maximal runs of letters and digits after NFKC and lower-casing. Chinese and
Japanese write without spaces, so a run of Han/Hiragana/Katakana characters is one *CJK
run* however long, and a CJK query term matches as a *substring* of a run
(``数据库端口`` is found in ``我们的数据库端口是``), while every other word must equal a
whole word (``port`` never matches ``export``). A word mixing scripts is cut where the
script changes: ``版本v2发布`` → ``版本``, ``v2``, ``发布``. Hangul is not CJK here: Korean
separates words with spaces.

The index (:mod:`shared.recall.schema`) holds each message twice, analyzed two ways:

- *words*, what ranking reads: the words outside CJK runs, less the stopwords
  (:data:`STOPWORDS`, Snowball's English list), each reduced to its Snowball stem, so
  ``hiking`` finds ``hike`` and ``adopted`` finds ``adoption``, while ``university`` and
  ``universe`` stay apart;
- *tokens*, what phrases and CJK terms are found in: every word as written (stopwords
  kept, nothing stemmed), and each CJK run written out as its overlapping bigrams and
  then its last character alone (``数据库`` → ``数据 据库 库``), each at its own position,
  so a CJK term is a phrase of its bigrams (found anywhere inside a run, and never across
  two runs: the lone last character sits between them) and a quoted phrase is matched on
  positions, whatever scripts it mixes.

Python does what tantivy's analyzers cannot: NFKC, and writing out the bigrams (its n-gram
tokenizer gives every n-gram the same position). Cutting words, dropping stopwords and
stemming are tantivy's (its simple tokenizer, stop-word filter and Snowball stemmer), for
messages and queries alike, so a query's terms are exactly the index's.

A query made only of stopwords (``IT``, ``The Who``, ``to be or not to be``) has no terms:
it falls back to matching those words as written, in the tokens.

:data:`ANALYZER_VERSION` names these rules: an index stored with another version is stale.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import TypeVar

import tantivy

ANALYZER_VERSION = 3
"""Bump whenever a text would be indexed differently (1: no stemming, no stopwords; 2:
our own engine's terms; 3: tantivy's words and tokens)."""

WORDS = "agentd_words"
TOKENS = "agentd_tokens"
"""The names the two analyzers are registered under in every index."""
T = TypeVar("T")

_STOP_LIST = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing would should could ought a an the and but if or because as until while of
    at by for with about against between into through during before after above below to
    from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too
    very cannot s t d ll m re ve don isn aren wasn weren hasn haven hadn doesn didn wouldn
    shan shouldn couldn mustn let
    """

STOPWORDS = frozenset(_STOP_LIST.split())
"""Snowball's English stop list, with the pieces its contractions tokenize into (``don't``
→ ``don``, ``t``); ``won`` (of ``won't``) stays a word, since it is also one."""

CJK_RANGES = (
    (0x3005, 0x3007), (0x3021, 0x3029), (0x3031, 0x3035), (0x3038, 0x303C), (0x3041, 0x3096),
    (0x309D, 0x309F), (0x30A1, 0x30FA), (0x30FC, 0x30FF), (0x3192, 0x3195), (0x31F0, 0x31FF),
    (0x3220, 0x3229), (0x3280, 0x3289), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D),
    (0xFA70, 0xFAD9), (0xFF66, 0xFF9F), (0x16FE3, 0x16FE3), (0x16FF2, 0x16FF6),
    (0x1AFF0, 0x1AFF3), (0x1AFF5, 0x1AFFB), (0x1AFFD, 0x1AFFE), (0x1B000, 0x1B128),
    (0x1B132, 0x1B132), (0x1B150, 0x1B152), (0x1B155, 0x1B155), (0x1B164, 0x1B168),
    (0x1D360, 0x1D371), (0x20000, 0x2A6DF), (0x2A700, 0x2B81E), (0x2B820, 0x2CEAD),
    (0x2CEB0, 0x2EBE0), (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D), (0x30000, 0x3134A),
    (0x31350, 0x33479),
)  # fmt: skip
"""The CJK characters: letters and digits (``[\\p{L}\\p{N}]``) whose Unicode script
extensions include Han, Hiragana or Katakana (so the long-vowel mark ``ー`` counts, and
punctuation such as ``。`` does not), as ranges: the standard library's ``re`` matches a
class of ranges several times faster than ``regex`` matches the properties.
``tests/recall/test_text.py`` checks the table against the properties."""
_CJK_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES)
_RUNS = re.compile(f"([{_CJK_CLASS}]+)")
"""CJK runs, captured, so that ``split`` alternates the text between them and the runs."""
_ALL_CJK = re.compile(f"[{_CJK_CLASS}]+")


def is_cjk(token: str) -> bool:
    """True when every character of ``token`` is CJK (and it is not empty)."""
    return bool(_ALL_CJK.fullmatch(token))


@cache
def analyzers() -> dict[str, tantivy.TextAnalyzer]:
    """The analyzers every index registers (built once: they hold no state)."""
    return {
        WORDS: tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.custom_stopword(sorted(STOPWORDS)))
        .filter(tantivy.Filter.stemmer("english"))
        .build(),
        TOKENS: tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).build(),
    }


def _normal(text: str) -> str:
    """NFKC, lower case (checking first is ~50 times cheaper than normalizing)."""
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return text.lower()


def spell_out(run: str) -> str:
    """A CJK run as the tokens field holds it: its bigrams, then its last character."""
    if len(run) == 1:
        return run
    return " ".join(map(str.__add__, run, run[1:])) + " " + run[-1]  # bigrams, fast


def bigrams(run: str) -> list[str]:
    return [a + b for a, b in pairwise(run)]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A text made ready for the index's two analyzers."""

    words: str
    """The text outside its CJK runs (the words analyzer cuts, drops and stems it)."""
    tokens: str
    """The text with each CJK run spelled out (:func:`spell_out`)."""


def prepare(text: str) -> Prepared:
    if text.isascii():  # nothing to normalize, no CJK run
        lowered = text.lower()
        return Prepared(lowered, lowered)
    parts = _RUNS.split(_normal(text))
    if len(parts) == 1:
        return Prepared(parts[0], parts[0])
    words = " ".join(parts[0::2])
    parts[1::2] = map(spell_out, parts[1::2])
    return Prepared(words, " ".join(parts))


def tokenize(text: str) -> list[str]:
    """The text's words in order, each CJK run whole: what a phrase is made of."""
    simple = analyzers()[TOKENS]
    tokens: list[str] = []
    for n, part in enumerate(_RUNS.split(_normal(text))):
        if n % 2:
            tokens.append(part)
        elif part:
            tokens += simple.analyze(part)
    return tokens


def index_terms(text: str) -> list[str]:
    """The words field's terms of a text, in order: its words less stopwords, stemmed."""
    return list(analyzers()[WORDS].analyze(prepare(text).words))


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...] = ()
    """Stems, matched in the words."""
    cjk: tuple[str, ...] = ()
    """CJK runs, matched as substrings in the tokens."""
    phrases: tuple[tuple[str, ...], ...] = ()
    """Each a sequence of words as written (CJK runs whole), matched in the tokens."""
    fallback: tuple[str, ...] = ()
    """A query of stopwords alone: those words as written, matched in the tokens."""

    @property
    def empty(self) -> bool:
        return not (self.terms or self.cjk or self.phrases or self.fallback)

    @property
    def term_count(self) -> int:
        """How many terms add to a score (a neighbour can lend only with two or more)."""
        return len(self.terms) + len(self.cjk) + len(self.fallback)


def parse_query(raw: str) -> Query:
    """Terms outside double quotes, phrases inside; an unclosed quote disables quoting."""
    text = raw.strip()
    if text.count('"') % 2:
        text = text.replace('"', " ")
    pieces = text.split('"')
    phrases = _unique(tuple(tokenize(piece)) for piece in pieces[1::2])
    parts = _RUNS.split(_normal(" ".join(pieces[0::2])))
    outside = " ".join(parts[0::2])
    terms = _unique(analyzers()[WORDS].analyze(outside))
    cjk = _unique(parts[1::2])
    fallback: list[str] = []
    if not (terms or cjk or phrases):
        fallback = _unique(analyzers()[TOKENS].analyze(outside))
    return Query(tuple(terms), tuple(cjk), tuple(p for p in phrases if p), tuple(fallback))


def _unique(items: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(items))
