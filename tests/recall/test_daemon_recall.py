"""Recall through the daemon: the seed walkthrough, the tools, restarts and the CLI ops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.ids import new_id
from shared.models.messages import Message
from shared.recall.documents import read_documents
from shared.recall.ranking import SearchRequest
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.messages import summary_payload
from tests.support.recall_oracle import scratch_index

STATEMENT = "我们的数据库端口是 5433，别用默认的 5432"
QUESTION = "还记得数据库端口吗？"


def _filler(n: int) -> str:
    return f"第 {n} 个无关话题：" + "今天天气不错。" * 12


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line["data"] for line in lines if line.get("event") == name]


def test_the_seed_walkthrough_recalls_the_port_after_several_compactions(
    daemon: DaemonRunner,
) -> None:
    daemon.start(context_window=1200)
    daemon.result("chat", {"text": STATEMENT})
    compactions = 0
    for n in range(1, 17):
        compactions += len(_events(daemon.call("chat", {"text": _filler(n)}), "compaction"))
    assert compactions >= 3

    lines = daemon.call("chat", {"text": QUESTION})

    (call,) = _events(lines, "tool_call")
    assert (call["name"], call["arguments"]) == ("recall_search", '{"query": "数据库端口"}')
    (result,) = _events(lines, "tool_result")
    assert f"· user] {STATEMENT} (id msg-" in result["content"].splitlines()[0]
    assert "5433" in lines[-1]["result"]["text"]
    assert lines[-1]["result"]["text"] == f"我在过去的对话里找到了：{STATEMENT}"

    hits = daemon.result("recall.search", {"query": "数据库端口"})["hits"]
    answer = f"我在过去的对话里找到了：{STATEMENT}"
    # The seed's order: the question, then the statement (3.40 / 3.00 there; the figures
    # depend on the sixteen fillers, which the seed does not give). The answer follows,
    # after the mock's shorter echo of the statement: a CJK run's length is its
    # characters' (the seed's, 2.88, counted runs).
    assert [(hit["role"], hit["text"]) for hit in hits[:2]] == [
        ("user", QUESTION),
        ("user", STATEMENT),
    ]
    assert ("assistant", answer) in [(hit["role"], hit["text"]) for hit in hits]
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1] > scores[2]


def test_english_recall_and_nothing_found(daemon: DaemonRunner) -> None:
    daemon.start()
    daemon.result("chat", {"text": "The staging deploy key lives in vault path secret/deploy"})
    found = daemon.result("chat", {"text": "Do you remember the deploy key?"})
    assert found["text"] == (
        "I found this in our past conversations: "
        "The staging deploy key lives in vault path secret/deploy"
    )
    missing = daemon.result("chat", {"text": "还记得火星基地吗？"})
    assert missing["text"] == "我在过去的对话里没有找到相关的内容。"
    # English words are matched by their stems (agentctl search asks the same).
    daemon.result("chat", {"text": "Last weekend we went hiking"})
    hits = daemon.result("recall.search", {"query": "hike"})["hits"]
    assert hits[0]["text"] == "Last weekend we went hiking"


def test_the_index_is_rebuilt_from_the_logs_after_a_restart(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "Heliotrope uses a SQLite migration guard"})
    daemon.stop()
    again = DaemonRunner(agentd_home)
    again.start()
    try:
        hits = again.result("recall.search", {"query": "heliotrope"})["hits"]
        assert [h["role"] for h in hits] == ["user", "assistant"]
    finally:
        again.stop()


def test_messages_around_a_hit_and_an_unknown_id(daemon: DaemonRunner) -> None:
    daemon.start()
    for text in ("one", "two needle", "three"):
        daemon.result("chat", {"text": text})
    (hit,) = daemon.result("recall.search", {"query": "needle", "role": "user"})["hits"]
    around = daemon.result(
        "messages.around", {"message_id": hit["message_id"], "before": 1, "after": 2}
    )
    assert [m["content"] for m in around["messages"]] == [
        "（mock）我听到了：one",
        "two needle",
        "（mock）我听到了：two needle",
        "three",
    ]
    missing = daemon.call("messages.around", {"message_id": "msg-nope"})[-1]
    assert missing["error"]["code"] == "unknown_message"


def test_search_filters_by_date_with_whole_days(daemon: DaemonRunner) -> None:
    daemon.start()
    daemon.result("chat", {"text": "quartz"})
    today = daemon.result("messages.list")["messages"][0]["created_at"][:10]
    assert daemon.result("recall.search", {"query": "quartz", "until": today})["hits"]
    assert daemon.result("recall.search", {"query": "quartz", "since": today})["hits"]
    assert not daemon.result("recall.search", {"query": "quartz", "until": "2000-01-01"})["hits"]
    bad = daemon.call("recall.search", {"query": "quartz", "since": "yesterday"})[-1]
    assert bad["error"]["code"] == "malformed_request"


def test_a_summary_newer_than_the_question_does_not_steal_its_demotion(tmp_path: Path) -> None:
    conversation = Conversation.create(Layout(tmp_path), "a", memory_head=None)

    def message(text: str, **fields: Any) -> Message:
        return Message.of(
            id=new_id("msg"),
            agent_id="a",
            conversation_id=conversation.id,
            role=fields.pop("role", "user"),
            content=text,
            **fields,
        )

    conversation.append([message(STATEMENT), message(QUESTION)])
    conversation.append(
        [
            message(
                "[system alert] 2 earlier messages … 还记得数据库端口",
                kind="summary",
                payload=summary_payload(),
            )
        ]
    )
    documents = list(read_documents(conversation.log.path))
    index = scratch_index()
    index.build(documents)
    by_offset = {document.offset: document.message_id for document in documents}

    ranked = index.search(SearchRequest("数据库端口", current_conversation_id=conversation.id))

    assert [by_offset[hit.offset] for hit in ranked] == [m.id for m in list(conversation.log)[:2]]
