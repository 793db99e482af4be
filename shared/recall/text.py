"""Tokens, terms and phrases: the text rules recall ranks by.

Words are maximal runs of letters and digits after NFKC and lower-casing. Chinese and
Japanese write without spaces, so a run of Han/Hiragana/Katakana characters is one token
however long, and a CJK term matches as a *substring* of such a token (``数据库端口`` is
found in ``我们的数据库端口是``), while every other term must equal a whole token
(``port`` never matches ``export``). A word mixing scripts is cut where the script changes:
``版本v2发布`` → ``版本``, ``v2``, ``发布``. Hangul is not CJK here: Korean separates
words with spaces. No stemming, no stop words.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

_WORD = regex.compile(r"[\p{L}\p{N}]+")
_CJK_CHARS = r"\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}"
_CJK_OR_NOT = regex.compile(rf"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")
_CJK_CHAR = regex.compile(rf"[{_CJK_CHARS}]")
_ALL_CJK = regex.compile(rf"[{_CJK_CHARS}]+")


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


def term_frequency(tokens: list[str], term: str) -> int:
    """Substring occurrences (non-overlapping) for a CJK term, whole tokens otherwise."""
    if is_cjk(term):
        return sum(token.count(term) for token in tokens)
    return sum(1 for token in tokens if token == term)


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
    phrases: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.terms and not self.phrases


def parse_query(raw: str) -> Query:
    """Terms outside double quotes, phrases inside; an unclosed quote disables quoting."""
    text = raw.strip()
    if text.count('"') % 2:
        return Query(tuple(_unique(tokenize(text))), ())
    terms: list[str] = []
    phrases: list[str] = []
    for index, part in enumerate(text.split('"')):
        if index % 2:
            phrase = " ".join(tokenize(part))
            if phrase:
                phrases.append(phrase)
        else:
            terms.extend(tokenize(part))
    return Query(tuple(_unique(terms)), tuple(_unique(phrases)))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
