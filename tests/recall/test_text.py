"""Tokens, index terms and query parsing: the spec's vectors, the analyzer for English
that issue 13 added, and what the index is given to analyze."""

from __future__ import annotations

import pytest
import regex

from shared.recall.text import (
    CJK_RANGES,
    Prepared,
    Query,
    index_terms,
    parse_query,
    prepare,
    tokenize,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("数据库端口是5433,用Postgres", ["数据库端口是", "5433", "用", "postgres"]),
        ("版本v2发布", ["版本", "v2", "发布"]),
        ("使用GPT4模型", ["使用", "gpt4", "模型"]),
        ("notree世界", ["notree", "世界"]),
        ("新しいコンピューターを購入", ["新しいコンピューターを購入"]),
        ("Ｈｅｌｌｏ　ＷＯＲＬＤ①", ["hello", "world1"]),
        (
            "SQLite-migration user_message it's",
            ["sqlite", "migration", "user", "message", "it", "s"],
        ),
        ("안녕하세요 세계", ["안녕하세요", "세계"]),
        ("x86_64 127.0.0.1 /var/log/backup.log v1.4.2", [
            "x86", "64", "127", "0", "0", "1", "var", "log", "backup", "log", "v1", "4", "2",
        ]),
    ],
)  # fmt: skip
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_the_index_is_given_cjk_runs_spelled_out_as_bigrams_and_their_last_character() -> None:
    assert prepare("数据库端口是5433,用Postgres") == Prepared(
        words=" 5433, postgres", tokens=" 数据 据库 库端 端口 口是 是 5433, 用 postgres"
    )
    assert prepare("Plain ASCII, untouched") == Prepared(
        "plain ascii, untouched", "plain ascii, untouched"
    )


@pytest.mark.parametrize(
    ("raw", "query"),
    [
        ('alpha "beta gamma" alpha delta', Query(("alpha", "delta"), (), (("beta", "gamma"),))),
        ('ab"cd ef"gh', Query(("ab", "gh"), (), (("cd", "ef"),))),
        # Terms are stems: "here" is a stopword, "unclosed" is stemmed.
        ('"unclosed phrase here', Query(("unclos", "phrase"))),
        ('"" ,;', Query()),
        # Phrases stay as typed; stopwords outside them go.
        ('the "Went Hiking" to', Query(phrases=(("went", "hiking"),))),
        # Nothing but stopwords: those words, as written.
        ("The THE it", Query(fallback=("the", "it"))),
        ('"the"', Query(phrases=(("the",),))),
        ("redis 密码 数据库", Query(("redi",), ("密码", "数据库"))),
    ],
)
def test_parse_query(raw: str, query: Query) -> None:
    assert parse_query(raw) == query


def test_index_terms_drop_stopwords_and_stem_latin_words_without_overstemming() -> None:
    text = "We went hiking; the adopted kids' adoption don't v2 数据库端口是 5433 мир"
    assert index_terms(text) == ["went", "hike", "adopt", "kid", "adopt", "v2", "5433", "мир"]
    assert index_terms("hike hikes hiked") == ["hike"] * 3
    assert index_terms("export port") == ["export", "port"]
    assert index_terms("migrations migration") == ["migrat", "migrat"]
    assert index_terms("university universe") == ["universiti", "univers"]


def test_the_cjk_table_is_unicode_s_cjk_letters_and_digits() -> None:
    """The ranges are the characters ``[\\p{L}\\p{N}]`` whose script extensions include Han,
    Hiragana or Katakana, by the regex module's Unicode tables."""
    cjk = regex.compile(r"[[\p{L}\p{N}]&&[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}]]", regex.V1)
    listed = {code for low, high in CJK_RANGES for code in range(low, high + 1)}
    found = {code for code in range(0x110000) if cjk.match(chr(code))}
    assert listed == found
