"""Ranking behaviour, pinned on the index (the reference scan agrees, see test_index)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.recall.documents import Document
from shared.recall.ranking import SearchRequest
from tests.support.recall_oracle import indexed, results


class _Index:
    """An index of documents, searched by message id."""

    def __init__(self, documents: tuple[Document, ...]) -> None:
        self.documents = documents
        self.index = indexed(documents)

    def search(self, request: SearchRequest) -> list[tuple[str, float]]:
        return results(self.index, self.documents, request)


def _index(*documents: Document) -> _Index:
    return _Index(documents)


def _ids(index: _Index, query: str, **fields: object) -> list[str]:
    return [message_id for message_id, _ in index.search(SearchRequest(query, **fields))]


def _doc(
    message_id: str,
    text: str,
    *,
    at: float,
    conversation: str = "c1",
    role: str = "user",
    echo: bool = False,
) -> Document:
    return Document(message_id, conversation, role, at, text, echo)


RANKING = [
    _doc("best", "Project Heliotrope uses a SQLite-migration guard.", at=1),
    _doc("migration-only", "The migration checklist covers backups.", at=2),
    _doc("reversed-phrase", "SQLite has a careful online migration plan.", at=3),
    _doc("phrase-token-suffix", "The notree pose is unrelated.", at=4),
    _doc("phrase-token-exact", "The tree pose is intentional.", at=5),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # BM25 over every word: the document with both rare words wins.
        ("heliotrope migration rollback", ["best", "migration-only", "reversed-phrase"]),
        # A phrase is required; "rollback" occurs nowhere and only adds nothing.
        ('"sqlite migration" rollback', ["best"]),
        # Phrase edges are whole tokens: "notree" does not hold "tree".
        ('"tree pose"', ["phrase-token-exact"]),
    ],
)
def test_ranking_corpus(query: str, expected: list[str]) -> None:
    assert _ids(_index(*RANKING), query) == expected


CJK = [
    _doc("chinese", "你好世界", at=1),
    _doc("japanese", "京都駅で会議", at=2),
    _doc("version", "版本v2发布", at=3),
    _doc("model", "使用GPT4模型", at=4),
    _doc("suffix", "notree世界", at=5),
    _doc("computer", "新しいコンピューターを購入", at=6),
    _doc("shop", "スーパーで買い物", at=7),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("京都", ["japanese"]),
        ("v2", ["version"]),
        ('"v2"', ["version"]),
        ("gpt4", ["model"]),
        ("コンピューター", ["computer"]),
        ('"コンピューター"', ["computer"]),
        # CJK terms match inside runs; the shorter document wins.
        # (a CJK run's length is its characters': "notree世界" is the shorter).
        ("世界", ["suffix", "chinese"]),
        # Equal phrase scores: the newer first.
        ('"世界"', ["suffix", "chinese"]),
        ('"tree"', []),
        ("買", ["shop"]),
    ],
)
def test_cjk_corpus(query: str, expected: list[str]) -> None:
    assert _ids(_index(*CJK), query) == expected


def test_search_echoes_neither_win_nor_skew_the_statistics() -> None:
    plain = [
        _doc("quartz", "quartz", at=1),
        _doc("orchid", "orchid orchid", at=2),
        _doc("other", "unrelated", at=3),
    ]
    echoes = [
        _doc(f"echo-{i}", "orchid " * 100, at=10 + i, conversation="c2", role="tool", echo=True)
        for i in range(12)
    ]
    alone = _index(*plain).search(SearchRequest("quartz orchid"))
    with_echoes = _index(*plain, *echoes).search(SearchRequest("quartz orchid"))
    assert [message_id for message_id, _ in alone] == ["orchid", "quartz"]
    assert [message_id for message_id, _ in with_echoes[:2]] == ["orchid", "quartz"]
    # Echoes hold no words the others are ranked by (no document frequency, no length):
    # they count only in the number of messages, which moves a score by a few percent.
    for (_, score), (_, alongside) in zip(alone, with_echoes, strict=False):
        assert abs(alongside - score) < 0.05 * score


SEED = [
    _doc("statement", "我们的数据库端口是 5433，别用默认的 5432", at=1),
    _doc(
        "echo-of-statement",
        "（mock）我听到了：我们的数据库端口是 5433，别用默认的 5432",
        at=2,
        role="assistant",
    ),
    _doc("filler", "第 1 个无关话题：今天天气不错。", at=3),
    _doc("question", "还记得数据库端口吗？", at=4),
]


def test_without_a_current_conversation_the_short_question_itself_ranks_first() -> None:
    assert _ids(_index(*SEED), "数据库端口")[:2] == ["question", "statement"]


def test_asked_from_inside_the_conversation_the_question_is_demoted() -> None:
    assert _ids(_index(*SEED), "数据库端口", current_conversation_id="c1")[0] == "statement"


def test_an_explicit_conversation_filter_makes_the_search_literal() -> None:
    found = _ids(_index(*SEED), "数据库端口", conversation_id="c1", current_conversation_id="c1")
    assert found[0] == "question"


def test_filters_by_conversation_role_and_dates() -> None:
    docs = [
        _doc("a", "deploy key", at=datetime(2026, 1, 1, tzinfo=UTC).timestamp()),
        _doc(
            "b",
            "deploy script",
            at=datetime(2026, 2, 1, tzinfo=UTC).timestamp(),
            conversation="c2",
            role="assistant",
        ),
    ]
    index = _index(*docs)
    assert _ids(index, "deploy", conversation_id="c2") == ["b"]
    assert _ids(index, "deploy", role="user") == ["a"]
    assert _ids(index, "deploy", since=datetime(2026, 1, 15, tzinfo=UTC)) == ["b"]
    assert _ids(index, "deploy", until=datetime(2026, 1, 15, tzinfo=UTC)) == ["a"]
    assert _ids(index, "deploy", conversation_id="nope") == []
    assert _ids(index, "deploy", limit=1) == ["b"]
    assert _ids(index, "deploy", limit=0) == []


def test_words_match_by_stem_and_phrases_stay_exact() -> None:
    index = _index(
        _doc("hiking", "Last weekend we went hiking in the hills.", at=1),
        _doc("other", "We went to the cinema.", at=2),
    )
    assert _ids(index, "hike") == ["hiking"]
    assert _ids(index, "Hikes") == ["hiking"]
    assert _ids(index, '"went hiking"') == ["hiking"]
    assert _ids(index, '"went hike"') == []
    assert _ids(index, '"went to the"') == ["other"]


def test_a_query_of_stopwords_alone_matches_them_as_written() -> None:
    """Stopwords add nothing to a query that has other words; alone, they are what is
    looked for (``IT``, ``The Who``), as words, not stems."""
    index = _index(
        _doc("to-be", "To be or not to be", at=1),
        _doc("other", "The cinema was closed", at=2),
        _doc("who", "We saw The Who live", at=3),
        _doc("its", "Its tail and its ears", at=4),
    )
    assert _ids(index, "to be") == ["to-be"]
    assert _ids(index, "to be or not to be") == ["to-be"]
    assert _ids(index, "the") == ["other", "who"]
    assert _ids(index, "The Who")[0] == "who"
    assert _ids(index, "IT") == []  # "its" is another word
    assert _ids(index, '"not to be"') == ["to-be"]
    assert _ids(index, '"the" cinema') == ["other", "who"]  # the phrase required, "cinema" adds
    assert _ids(index, "the cinema") == ["other"]


def test_a_reply_ranks_by_the_question_before_it_too() -> None:
    """ "reply" and "elsewhere" match "adoption" alike and "elsewhere" is newer, but "reply"
    answers a question about research. "elsewhere" follows a research message by number,
    not in its conversation: that lends it nothing."""
    index = _index(
        _doc("question", "What did you research last month?", at=1),
        _doc("reply", "Adoption agencies, mostly.", at=2),
        _doc("interleaved", "Research papers are due", at=3, conversation="c2"),
        _doc("elsewhere", "Adoption forms, mostly.", at=4, conversation="c3"),
    )
    found = _ids(index, "research adoption")
    assert found.index("reply") < found.index("elsewhere")


def test_only_the_message_just_before_or_after_lends_not_one_further_in_its_block() -> None:
    """The loans are read by blocks of eight messages (``block`` in shared.recall.schema):
    a message two places off, in the same block, lends nothing; "lent" (a question just
    before it) beats "two-off", which is newer and matches alike."""
    index = _index(
        _doc("far-question", "What did you research last month?", at=1),
        _doc("filler", "Fine, thanks.", at=2),
        _doc("two-off", "Adoption forms, mostly.", at=10),
        _doc("question", "What did you research last week?", at=3, conversation="c2"),
        _doc("lent", "Adoption agencies, mostly.", at=4, conversation="c2"),
    )
    found = _ids(index, "research adoption")
    assert found.index("lent") < found.index("two-off")
