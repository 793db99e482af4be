"""Tokens, terms and phrases: the text rules recall ranks by.

Words are maximal runs of letters and digits after NFKC and lower-casing: the *tokens*.
Chinese and Japanese write without spaces, so a run of Han/Hiragana/Katakana characters is
one token however long, and a CJK term matches as a *substring* of such a token
(``数据库端口`` is found in ``我们的数据库端口是``), while every other term must equal a
whole term (``port`` never matches ``export``). A word mixing scripts is cut where the
script changes: ``版本v2发布`` → ``版本``, ``v2``, ``发布``. Hangul is not CJK here: Korean
separates words with spaces.

Ranking reads *index terms*, made from the tokens by an analyzer for English: stopwords
(:data:`STOPWORDS`, Snowball's English list) are left out, and a token holding Latin
letters is reduced to its Snowball stem, so ``hiking`` finds ``hike`` and ``adopted``
finds ``adoption``; CJK runs, numbers and other scripts are their own terms. Query and
documents go through the same analyzer. Quoted phrases are matched on the tokens, exactly
as typed, stopwords included. A query of nothing but stopwords (``the``, ``to be``) finds
nothing, as in Lucene's English analyzer: matching them would read most of the history
(seconds at a million messages) to rank by words that say nothing; quoted (``"to be"``),
they are found as a phrase.

:data:`ANALYZER_VERSION` names these rules: an index stored with another version is stale.
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import regex
import Stemmer

ANALYZER_VERSION = 2
"""Bump whenever a text would get different tokens or index terms (1: no stemming, no
stopwords)."""

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

_WORD = regex.compile(r"[\p{L}\p{N}]+")
_CJK_CHARS = r"\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}"
_CJK_OR_NOT = regex.compile(rf"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")
_CJK_CHAR = regex.compile(rf"[{_CJK_CHARS}]")
_ALL_CJK = regex.compile(rf"[{_CJK_CHARS}]+")
_LATIN = regex.compile(r"\p{Latin}")
_stemmers = threading.local()
"""A Snowball stemmer keeps state while it stems: one per thread."""


def is_cjk(token: str) -> bool:
    """True when every character of ``token`` is CJK (and it is not empty)."""
    return bool(_ALL_CJK.fullmatch(token))


def is_cjk_char(char: str) -> bool:
    return bool(_CJK_CHAR.fullmatch(char))


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        if not _CJK_CHAR.search(word) or is_cjk(word):
            tokens.append(word)
        else:
            tokens.extend(_CJK_OR_NOT.findall(word))
    return tokens


def index_terms(tokens: list[str]) -> list[str]:
    """The terms ranking reads, in order: the tokens less stopwords, Latin words stemmed."""
    return [index_term(token) for token in tokens if token not in STOPWORDS]


@lru_cache(maxsize=1 << 16)
def index_term(token: str) -> str:
    """A non-stopword token's term: its stem if it holds Latin letters, else itself."""
    if not _LATIN.search(token):
        return token
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    return stemmer.stemWord(token)


def term_frequency(terms: list[str], term: str) -> int:
    """Substring occurrences (non-overlapping) for a CJK term, whole terms otherwise."""
    if is_cjk(term):
        return sum(candidate.count(term) for candidate in terms)
    return sum(1 for candidate in terms if candidate == term)


def phrase_matches(normalized: str, phrase: str) -> bool:
    """Does the space-joined token text contain ``phrase``? Latin edges must fall on token
    boundaries; CJK edges may fall inside a CJK token."""
    padded = f" {normalized} "
    left = "" if is_cjk_char(phrase[0]) else " "
    right = "" if is_cjk_char(phrase[-1]) else " "
    return f"{left}{phrase}{right}" in padded


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...]
    """Index terms."""
    phrases: tuple[str, ...]
    """Token text (tokens joined by single spaces), matched exactly."""

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases


def parse_query(raw: str) -> Query:
    """Terms outside double quotes, phrases inside; an unclosed quote disables quoting."""
    text = raw.strip()
    if text.count('"') % 2:
        return Query(tuple(_unique(index_terms(tokenize(text)))), ())
    tokens: list[str] = []
    phrases: list[str] = []
    for index, part in enumerate(text.split('"')):
        if index % 2:
            phrase = " ".join(tokenize(part))
            if phrase:
                phrases.append(phrase)
        else:
            tokens.extend(tokenize(part))
    return Query(tuple(_unique(index_terms(tokens))), tuple(_unique(phrases)))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
