"""Tokens, index terms, term frequency and query parsing: the spec's vectors, and the
analyzer for English that issue 13 added."""

from __future__ import annotations

import pytest

from shared.recall.text import (
    Query,
    index_terms,
    parse_query,
    phrase_matches,
    term_frequency,
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
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


@pytest.mark.parametrize(
    ("tokens", "term", "tf"),
    [
        (["我们的数据库端口是"], "数据库端口", 1),  # CJK: substring inside a run
        (["export"], "port", 0),  # Latin: whole tokens only
        (["你好世界", "notree", "世界"], "世界", 2),
        (["哈哈哈哈"], "哈哈", 2),  # non-overlapping
        (["a", "b", "a"], "a", 2),
    ],
)
def test_term_frequency(tokens: list[str], term: str, tf: int) -> None:
    assert term_frequency(tokens, term) == tf


@pytest.mark.parametrize(
    ("raw", "query"),
    [
        ('alpha "beta gamma" alpha delta', Query(("alpha", "delta"), ("beta gamma",))),
        ('ab"cd ef"gh', Query(("ab", "gh"), ("cd ef",))),
        # Terms are index terms: "here" is a stopword, "unclosed" is stemmed.
        ('"unclosed phrase here', Query(("unclos", "phrase"), ())),
        ('"" ,;', Query((), ())),
        # Phrases stay as typed; stopwords outside them go.
        ('the "Went Hiking" to', Query((), ("went hiking",))),
        # Nothing but stopwords: nothing to search for, unless quoted.
        ("The THE it", Query((), ())),
        ('"the"', Query((), ("the",))),
    ],
)
def test_parse_query(raw: str, query: Query) -> None:
    assert parse_query(raw) == query


def test_latin_phrase_edges_fall_on_tokens_and_cjk_edges_may_fall_inside() -> None:
    assert phrase_matches("the tree pose is", "tree pose")
    assert not phrase_matches("the notree pose", "tree pose")
    assert phrase_matches("notree 世界", "世界")
    assert phrase_matches("你好世界", "世界")


def test_index_terms_drop_stopwords_and_stem_latin_words_only() -> None:
    tokens = tokenize("We went hiking; the adopted kids' adoption don't v2 数据库端口是 5433 мир")
    assert index_terms(tokens) == [
        "went",
        "hike",
        "adopt",
        "kid",
        "adopt",
        "v2",
        "数据库端口是",
        "5433",
        "мир",
    ]
    assert index_terms(tokenize("hike hikes hiked")) == ["hike"] * 3
    assert index_terms(tokenize("export port")) == ["export", "port"]
