"""CJK terms against the reference scan, where the index takes shortcuts: a two-character
term's frequency read from its bigram's postings (exact unless the characters repeat or
the count saturates), a longer term looked for only where one of its bigrams occurs once
(an offset known modulo 128), else counted in the in-scope candidates, and phrases
checked only in in-scope documents holding all their words and bigrams."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.recall.documents import Document
from shared.recall.index import AgentIndex
from shared.recall.ranking import SearchRequest
from shared.recall.segments import MAX_BIGRAM_TF
from tests.support.recall_oracle import reference_search

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


def _same(index: AgentIndex, documents: list[Document], request: SearchRequest) -> None:
    actual = [(index.message_id(n), score) for n, score in index.search(request)]
    expected = reference_search(documents, request)
    assert [i for i, _ in actual] == [i for i, _ in expected]
    for (_, a), (_, e) in zip(actual, expected, strict=True):
        assert abs(a - e) <= 1e-9


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cjk_corpora(), cjk_requests(), st.booleans())
def test_cjk_terms_and_phrases_agree_with_the_reference_scan(
    documents: list[Document], request: SearchRequest, appended: bool
) -> None:
    index = AgentIndex(open_segment_docs=4, segment_capacity=8)
    if appended:  # through the open segment, frozen and merged ones
        for document in documents:
            index.add(document)
    else:
        index.build(documents)
    _same(index, documents, request)


def test_saturated_bigram_counts_and_offsets_past_the_modulus() -> None:
    many = MAX_BIGRAM_TF + 40
    documents = [
        Document("a", "c1", "user", 1.0, "你好" * many, False),
        Document("b", "c1", "user", 2.0, "哈" * (2 * many + 1), False),
        Document("c", "c2", "assistant", 3.0, "你好 哈哈 " * MAX_BIGRAM_TF, False),
        Document("d", "c2", "user", 4.0, "你好哈哈", False),
        Document("d2", "c2", "user", 4.5, "哈哈哈 你好哈哈哈哈哈", False),
        Document("e", "c1", "tool", 5.0, "其他", False),
    ]
    documents += [
        Document(f"far-{n}", "c1", "user", 6.0 + n, "ok " * n + "们" * (n % 7) + "你好哈", False)
        for n in range(0, 400, 23)
    ]
    documents.append(Document("wide", "c2", "user", 500.0, "𠮷" * 50 + "你好哈 们𠮷你好", False))
    index = AgentIndex()
    index.build(documents)
    for query in ("你好", "哈哈", "哈", "好哈", "你好哈", "你好哈哈", "们𠮷你好", '"好 哈哈"'):
        for fields in ({}, {"role": "user"}, {"since": datetime.fromtimestamp(2, UTC)}):
            _same(index, documents, SearchRequest(query, **fields))  # type: ignore[arg-type]
