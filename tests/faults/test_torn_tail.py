"""A crash that leaves the log's last message whole but without its newline: recall and the
log agree on it, across restarts, before and after the next chat repairs the tail.

The line is a complete message (only the ``\\n`` is missing), so it is kept as the
message it is, everywhere: recall finds it with its text, ``messages --around`` shows it,
the conversation lists it, and the repair only adds the newline. A fragment that is not
a whole line is set aside (``messages.jsonl.torn``) and found nowhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.ids import new_id
from shared.models.messages import Message
from tests.support.daemon import DaemonRunner


def _log(home: Path, conversation: str) -> Path:
    [path] = home.glob(f"agents/*/conversations/{conversation}/messages.jsonl")
    return path


def _crash_leaves(home: Path, conversation: str, tail: bytes) -> None:
    with open(_log(home, conversation), "ab") as handle:
        handle.write(tail)


def _restarted(runner: DaemonRunner, home: Path) -> DaemonRunner:
    runner.stop()
    again = DaemonRunner(home)
    again.start()
    return again


def _unterminated(home: Path, agent_id: str, conversation: str, text: str) -> tuple[str, bytes]:
    message = Message.of(
        id=new_id("msg"), agent_id=agent_id, conversation_id=conversation, role="user", content=text
    )
    return message.id, message.to_line().removesuffix(b"\n")


@pytest.mark.slow
def test_a_whole_last_line_without_its_newline_is_one_message_to_recall_and_the_log(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    first = daemon.result("chat", {"text": "first words"})
    conversation = first["conversation_id"]
    agent_id = daemon.result("agent.show", {})["id"]
    daemon.stop()
    message_id, line = _unterminated(
        agentd_home, agent_id, conversation, "tangerine survived the crash"
    )
    _crash_leaves(agentd_home, conversation, line)

    runner = DaemonRunner(agentd_home)
    runner.start()
    try:
        before_repair = runner.result("recall.search", {"query": "tangerine"})["hits"]
        runner.result("chat", {"text": "after the crash", "conversation": conversation})
        runner = _restarted(runner, agentd_home)
        hits = runner.result("recall.search", {"query": "tangerine"})["hits"]
        around = runner.result("messages.around", {"message_id": message_id, "before": 0})
        listed = runner.result(
            "messages.list", {"conversation": conversation, "limit": 100, "order": "asc"}
        )["messages"]
    finally:
        runner.stop()

    expected = [(message_id, "tangerine survived the crash")]
    assert [(h["message_id"], h["text"]) for h in before_repair] == expected
    assert [(h["message_id"], h["text"]) for h in hits] == expected
    assert around["messages"][0]["id"] == message_id
    assert around["messages"][0]["content"] == "tangerine survived the crash"
    assert [m["content"] for m in listed if m["role"] == "user"] == [
        "first words",
        "tangerine survived the crash",
        "after the crash",
    ]
    data = _log(agentd_home, conversation).read_bytes()
    assert line + b"\n" in data, "the repair only added the newline"
    assert not _log(agentd_home, conversation).with_name("messages.jsonl.torn").exists()


@pytest.mark.slow
def test_a_fragment_of_a_line_is_found_nowhere_before_or_after_the_repair(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    conversation = daemon.result("chat", {"text": "first words"})["conversation_id"]
    agent_id = daemon.result("agent.show", {})["id"]
    daemon.stop()
    message_id, line = _unterminated(agentd_home, agent_id, conversation, "apricot torn apart")
    fragment = line[: line.index(b"apricot") + len("apricot torn")]
    _crash_leaves(agentd_home, conversation, fragment)

    runner = DaemonRunner(agentd_home)
    runner.start()
    try:
        before_repair = runner.result("recall.search", {"query": "apricot"})["hits"]
        runner.result("chat", {"text": "after the crash", "conversation": conversation})
        runner = _restarted(runner, agentd_home)
        hits = runner.result("recall.search", {"query": "apricot"})["hits"]
        around = runner.call("messages.around", {"message_id": message_id})[-1]
    finally:
        runner.stop()

    assert before_repair == [] and hits == []
    assert around["error"]["code"] == "unknown_message"
    torn = _log(agentd_home, conversation).with_name("messages.jsonl.torn")
    assert torn.read_bytes() == fragment + b"\n"
