"""CJK terms and phrases against the reference scan: a CJK term is a phrase of its
bigrams in the index (one of two characters a bigram, one of one a bigram's first
character or a run's last), and a quoted phrase is positions across runs and words; the
reference decides from the text alone which messages hold each, and tantivy must find
exactly those (substring search is complete), ranked by the same rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.recall.documents import Document
from shared.recall.index import AgentIndex
from shared.recall.ranking import SearchRequest
from tests.support.recall_oracle import (
    assert_agrees,
    indexed,
    numbered,
    reference_search,
    results,
    scratch_index,
)

CHARS = "哈你好们我𠮷"
"""Few characters, so terms of any length share bigrams with many documents, repeat
(哈哈哈 holds 哈哈 twice, but only once without overlap), and often fail to occur; 𠮷 is
four bytes in UTF-8, the others three."""

REPEATS = st.builds(lambda char, times: char * times, st.sampled_from(CHARS), st.integers(2, 6))
TRICKY = st.sampled_from(["哈哈", "你你", "你好", "好你", "哈哈哈", "你好你好", "们们们", "𠮷你好"])
TERMS = TRICKY | st.text(CHARS, min_size=1, max_size=4)
PADDING = st.sampled_from(["", "ok " * 50, "们" * 45, "𠮷" * 40, "数据库" * 30 + " ", "你 " * 100])
"""Long stretches, so that offsets in a document pass the bigram codes' modulus of 128."""

# Strategies are built once here, not inside the composites: building one per draw made
# Hypothesis spend most of this file's time validating strategies rather than testing.
RUNS = st.lists(REPEATS | st.text(CHARS, min_size=1, max_size=7) | PADDING, max_size=6)
SEPARATOR = st.sampled_from([" ", "。", " ok ", "x"])


@st.composite
def cjk_texts(draw: st.DrawFn) -> str:
    runs = draw(RUNS)
    separators = draw(st.lists(SEPARATOR, min_size=len(runs)))
    return draw(PADDING) + "".join(run + sep for run, sep in zip(runs, separators, strict=False))


CJK_TEXTS = cjk_texts()
CONVERSATIONS = st.sampled_from(["c1", "c2"])
ROLES = st.sampled_from(["user", "assistant"])
TIMES = st.integers(0, 10)


@st.composite
def cjk_corpora(draw: st.DrawFn) -> list[Document]:
    return [
        Document(
            message_id=f"m{i:03d}",
            conversation_id=draw(CONVERSATIONS),
            role=draw(ROLES),
            created_at=float(draw(TIMES)),
            text=draw(CJK_TEXTS),
            echo=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 30)))
    ]


def _moment(draw: st.DrawFn) -> datetime | None:
    at = draw(st.none() | st.integers(0, 10))
    return None if at is None else datetime.fromtimestamp(at, UTC)


@st.composite
def cjk_requests(draw: st.DrawFn) -> SearchRequest:
    terms = draw(st.lists(TERMS, min_size=1, max_size=3))
    words = list(terms)
    if draw(st.booleans()):
        phrase = draw(st.lists(TERMS | st.just("ok"), max_size=2))
        words.append('"' + " ".join(phrase) + '"')
    if draw(st.booleans()):
        words = words[-1:]  # a phrase alone, or a single term
    return SearchRequest(
        query=" ".join(words),
        limit=draw(st.integers(1, 8)),
        conversation_id=draw(st.none() | st.just("c1")),
        role=draw(st.none() | st.just("user")),
        since=_moment(draw),
        until=_moment(draw),
        current_conversation_id=draw(st.none() | st.just("c2")),
    )


@pytest.fixture(autouse=True)
def every_match_reranked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shared.recall.search.CANDIDATES", 10_000)


def _same(index: AgentIndex, documents: list[Document], request: SearchRequest) -> None:
    assert_agrees(results(index, documents, request), reference_search(documents, request))


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cjk_corpora(), st.lists(cjk_requests(), min_size=1, max_size=3), st.booleans())
def test_cjk_terms_and_phrases_agree_with_the_reference_scan(
    documents: list[Document], requests: list[SearchRequest], appended: bool
) -> None:
    """Every message holding a CJK term as a substring is found, and no other (the
    reference asks tantivy for each term's matches and compares them with the text).
    Each corpus is asked 1-3 requests (2 on average): its index costs more to make (a
    commit each when appended) than a request to ask, so 100 corpora asked that many
    compare as many requests as 200 corpora asked one, in less time."""
    documents = numbered(documents)
    index = scratch_index()
    if appended:  # committed one by one: many small segments
        for document in documents:
            index.add(document)
            index.commit()
    else:
        index.build(documents)
    for request in requests:
        _same(index, documents, request)


def test_repeats_long_runs_and_four_byte_characters() -> None:
    documents = [
        Document("a", "c1", "user", 1.0, "你好" * 200, False),
        Document("b", "c1", "user", 2.0, "哈" * 301, False),
        Document("c", "c2", "assistant", 3.0, "你好 哈哈 " * 150, False),
        Document("d", "c2", "user", 4.0, "你好哈哈", False),
        Document("d2", "c2", "user", 4.5, "哈哈哈 你好哈哈哈哈哈", False),
        Document("e", "c1", "tool", 5.0, "其他", False),
    ]
    documents += [
        Document(f"far-{n}", "c1", "user", 6.0 + n, "ok " * n + "们" * (n % 7) + "你好哈", False)
        for n in range(0, 400, 23)
    ]
    documents.append(Document("wide", "c2", "user", 500.0, "𠮷" * 50 + "你好哈 们𠮷你好", False))
    documents = numbered(documents)
    index = indexed(documents)
    for query in ("你好", "哈哈", "哈", "好哈", "你好哈", "你好哈哈", "们𠮷你好", '"好 哈哈"'):
        for fields in ({}, {"role": "user"}, {"since": datetime.fromtimestamp(2, UTC)}):
            request = SearchRequest(query, limit=100, **fields)  # type: ignore[arg-type]
            _same(index, documents, request)


def test_a_term_never_matches_across_two_runs() -> None:
    """``数据库`` is not in ``数据，库存`` nor in ``数据 据库`` (a run ending in 数据 and
    one starting 据库: their bigrams follow one another, the run's lone last character
    stands between them)."""
    documents = numbered(
        [
            Document("apart", "c", "user", 1.0, "数据，库存", False),
            Document("overlap", "c", "user", 2.0, "数据 据库", False),
            Document("whole", "c", "user", 3.0, "我们的数据库", False),
        ]
    )
    index = indexed(documents)
    assert [i for i, _ in results(index, documents, SearchRequest("数据库"))] == ["whole"]
    assert [i for i, _ in results(index, documents, SearchRequest('"据库"'))] == [
        "whole",
        "overlap",
    ]
