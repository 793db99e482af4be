"""The index against the reference scan: same ids, same order, scores within 1e-9."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.recall.documents import Document
from shared.recall.index import AgentIndex
from shared.recall.ranking import SearchRequest
from shared.recall.search import Search
from tests.support.recall_oracle import reference_search

WORDS = [
    "port",
    "export",
    "deploy",
    "key",
    "tree",
    "notree",
    "v2",
    "5433",
    "数据库",
    "端口",
    "数据库端口",
    "世界",
    "你好",
    "哈哈",
    "哈",
    "用",
    "コンピューター",
    "京都",
    "gpt4",
    "pose",
    "deploys",
    "deploying",
    "hiking",
    "the",
    "it",
    "to",
    "s",
]
"""Words that share a stem (deploy, deploys, deploying) or are stopwords (the, it, to, s:
a query of those alone finds nothing, a quoted one is a phrase), besides CJK and
exact-token cases."""
SEPARATORS = [" ", "", ", ", "-", "。", "\n"]


# Strategies are built once here, not inside the composites: building one per draw made
# Hypothesis spend much of this file's time validating strategies rather than testing.
TEXTS = st.lists(
    st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), min_size=0, max_size=12
).map(lambda parts: "".join(word + sep for word, sep in parts))
CONVERSATIONS = st.sampled_from(["c1", "c2", "c3"])
ROLES = st.sampled_from(["user", "assistant", "tool"])
TIMES = st.integers(0, 20)


@st.composite
def corpora(draw: st.DrawFn) -> list[Document]:
    count = draw(st.integers(0, 40))
    documents = []
    for i in range(count):
        documents.append(
            Document(
                message_id=f"msg-{i:04d}",
                conversation_id=draw(CONVERSATIONS),
                role=draw(ROLES),
                created_at=float(draw(TIMES)),  # ties on purpose
                text=draw(TEXTS),
                echo=draw(st.booleans()),
            )
        )
    return documents


@st.composite
def requests(draw: st.DrawFn) -> SearchRequest:
    words = draw(st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=4))
    if draw(st.booleans()):
        phrase = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2))
        words.append('"' + draw(st.sampled_from([" ", ""])).join(phrase) + '"')
    since = draw(st.none() | st.integers(0, 20))
    return SearchRequest(
        query=" ".join(words),
        limit=draw(st.integers(0, 12)),
        conversation_id=draw(st.none() | st.sampled_from(["c1", "c2", "missing"])),
        role=draw(st.none() | st.sampled_from(["user", "tool"])),
        since=None if since is None else datetime.fromtimestamp(since, UTC),
        current_conversation_id=draw(st.none() | st.sampled_from(["c1", "c3"])),
    )


def _index_results(index: AgentIndex, request: SearchRequest) -> list[tuple[str, float]]:
    return [(index.message_id(n), score) for n, score in index.search(request)]


def _assert_same(actual: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [i for i, _ in actual] == [i for i, _ in expected]
    for (_, a), (_, e) in zip(actual, expected, strict=True):
        assert abs(a - e) <= 1e-9


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), requests())
def test_the_index_agrees_with_the_reference_scan(
    documents: list[Document], request: SearchRequest
) -> None:
    index = AgentIndex()
    index.build(documents)
    _assert_same(_index_results(index, request), reference_search(documents, request))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), requests())
def test_texts_read_in_batches_agree_too(documents: list[Document], request: SearchRequest) -> None:
    """Phrases and CJK counts read the text a batch at a time (so a search lets the event
    loop run between batches); batches of two cut every segment's candidates."""
    index = AgentIndex()
    index.build(documents)
    with mock.patch("shared.recall.search.TEXT_BATCH", 2):
        _assert_same(_index_results(index, request), reference_search(documents, request))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), corpora(), requests())
def test_appends_through_frozen_and_merged_segments_agree_too(
    first: list[Document], more: list[Document], request: SearchRequest
) -> None:
    more = [
        Document(
            f"late-{d.message_id}", d.conversation_id, d.role, d.created_at + 30, d.text, d.echo
        )
        for d in more
    ]
    index = AgentIndex(open_segment_docs=3, segment_capacity=9)
    index.build(first)
    for document in more:
        index.add(document)
    _assert_same(_index_results(index, request), reference_search(first + more, request))


def test_a_message_id_finds_its_document_even_among_prefixes_of_each_other() -> None:
    ids = ["m1", "m12", "m123", "x-m1", "m"]
    index = AgentIndex(open_segment_docs=2, segment_capacity=4)
    index.build(Document(i, "c", "user", 1.0, f"text {i}", False) for i in ids)
    assert [index.number_of(i) for i in ids] == [0, 1, 2, 3, 4]
    assert [index.message_id(n) for n in range(5)] == ids
    assert index.number_of("m1234") is None and index.number_of("1") is None


def test_an_append_does_not_wait_for_a_running_search_and_the_next_search_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = AgentIndex()
    index.build([Document("m1", "c", "user", 1.0, "deploy key", False)])
    scanning, finish = threading.Event(), threading.Event()
    scan = Search.run

    def slow_scan(search: Any) -> Any:
        scanning.set()
        assert finish.wait(30), "the test never let the search finish"
        return scan(search)

    monkeypatch.setattr(Search, "run", slow_scan)
    searching = threading.Thread(target=index.search, args=(SearchRequest(query="deploy"),))
    searching.start()
    assert scanning.wait(30)

    appending = threading.Thread(
        target=index.add, args=(Document("m2", "c", "user", 2.0, "deploy vault", False),)
    )
    appending.start()
    appending.join(10)
    added_during_the_search = not appending.is_alive()
    finish.set()
    searching.join(30)
    appending.join(30)

    assert added_during_the_search, "index.add waited for the running search"
    monkeypatch.setattr(Search, "run", scan)
    assert [i for i, _ in _index_results(index, SearchRequest(query="vault"))] == ["m2"]
