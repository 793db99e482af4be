"""The index against the reference scan: the same matches, the same scores (to tantivy's
float precision), in the same order."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared.recall.search
from shared.recall.documents import Document
from shared.recall.ranking import SearchRequest
from tests.support.recall_oracle import (
    assert_agrees,
    indexed,
    numbered,
    reference_search,
    results,
    scratch_index,
)
from tests.support.waiting import ceiling

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
a query of those alone matches them as written, a quoted one is a phrase), besides CJK
and exact-token cases."""
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


@pytest.fixture(autouse=True)
def every_match_reranked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference lends to every match; the index to its best candidates (enough on
    real conversations, see ``CANDIDATES``): here, to every match too."""
    monkeypatch.setattr("shared.recall.search.CANDIDATES", 10_000)


SEVERAL_REQUESTS = st.lists(requests(), min_size=1, max_size=3)
"""What each corpus is asked: its index costs more to make (a commit each when appended)
than a request to ask, so half as many corpora asked 1-3 requests each (2 on average)
compare as many requests as twice as many corpora asked one, in less time."""


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), SEVERAL_REQUESTS)
def test_the_index_agrees_with_the_reference_scan(
    documents: list[Document], asked: list[SearchRequest]
) -> None:
    index = indexed(documents)
    for request in asked:
        assert_agrees(results(index, documents, request), reference_search(documents, request))


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora(), corpora(), SEVERAL_REQUESTS)
def test_appends_committed_one_by_one_agree_too(
    first: list[Document], more: list[Document], asked: list[SearchRequest]
) -> None:
    """Each append committed apart (as the daemon's turns are): many small segments."""
    more = [
        Document(
            f"late-{d.message_id}", d.conversation_id, d.role, d.created_at + 30, d.text, d.echo
        )
        for d in more
    ]
    everything = numbered(first + more)
    index = scratch_index()
    index.build(everything[: len(first)])
    for document in everything[len(first) :]:
        index.add(document)
        index.commit()
    for request in asked:
        assert_agrees(results(index, everything, request), reference_search(everything, request))


def test_a_message_id_finds_its_message_even_among_ids_ending_alike() -> None:
    ids = ["m1", "m12", "m123", "x-m1", "m"]
    documents = [Document(i, "c", "user", 1.0, f"text {i}", False) for i in ids]
    index = indexed(documents)
    index.know(["c"])
    assert [index.locate(i) for i in ids] == [[("c", n)] for n in range(5)]
    assert sorted(index.locate("m1", suffix=True)) == [("c", 0), ("c", 3)]
    assert index.locate("m1234") == [] and index.locate("1") == []


def test_an_append_does_not_wait_for_a_running_search_and_the_next_search_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    documents = numbered(
        [
            Document("m1", "c", "user", 1.0, "deploy key", False),
            Document("m2", "c", "user", 2.0, "deploy vault", False),
        ]
    )
    index = scratch_index()
    index.build(documents[:1])
    scanning, finish = threading.Event(), threading.Event()
    ranking = shared.recall.search.run

    def slow_run(*args: Any) -> Any:
        scanning.set()
        assert finish.wait(ceiling(30)), "the test never let the search finish"
        return ranking(*args)

    monkeypatch.setattr(shared.recall.search, "run", slow_run)
    searching = threading.Thread(target=index.search, args=(SearchRequest(query="deploy"),))
    searching.start()
    assert scanning.wait(ceiling(30))

    appending = threading.Thread(target=index.add, args=(documents[1],))
    appending.start()
    appending.join(ceiling(10))
    added_during_the_search = not appending.is_alive()
    finish.set()
    searching.join(ceiling(30))
    appending.join(ceiling(30))

    assert added_during_the_search, "index.add waited for the running search"
    monkeypatch.setattr(shared.recall.search, "run", ranking)
    assert [i for i, _ in results(index, documents, SearchRequest(query="vault"))] == ["m2"]
