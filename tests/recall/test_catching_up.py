"""While the index catches up on the logs after a restart, a search answers over what is
open and says what it may miss: the model reads it in the tool's result, the user on
agentctl's stderr, and neither takes a partial answer for a whole one. A restart over an
index that misses nothing (or only a few lines) says nothing of the kind, not even for
a moment."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.recall.service import READ_AT_OPEN
from shared.ids import new_id
from shared.models.messages import Message
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.held_recall import RELEASE_ENV
from tests.support.processes import run_agentctl
from tests.support.waiting import wait_for


def not_yet(count: int) -> str:
    return f"index catching up: {count} messages not searchable yet"


def _recall_state(daemon: DaemonRunner) -> str:
    (agent,) = daemon.result("status")["agents"]
    return str(agent["recall"]["state"])


TAIL = READ_AT_OPEN + 1
"""Messages written after a stop that the restart reads in the background."""


def _written_after_the_stop(home: Path, agent_id: str, count: int) -> None:
    """Messages the stopped daemon never indexed (a tail to catch up on)."""
    layout = Layout(home)
    (conversation,) = layout.conversations_dir(agent_id).iterdir()
    MessageLog(layout.conversation_files(agent_id, conversation.name).messages).append(
        [
            Message.of(
                id=new_id("msg"),
                agent_id=agent_id,
                conversation_id=conversation.name,
                role="user",
                content=f"apple crumble {n}",
            )
            for n in range(count)
        ]
    )


@pytest.mark.slow
def test_a_search_while_the_index_catches_up_says_what_it_cannot_see_yet(
    daemon: DaemonRunner, agentd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple pie recipe"})
    (agent,) = daemon.result("status")["agents"]
    daemon.stop()
    _written_after_the_stop(agentd_home, agent["id"], TAIL)
    release = agentd_home / "release-the-catch-up"
    monkeypatch.setattr("agentd.recall.client.RECALL_MODULE", "tests.support.held_recall")
    monkeypatch.setenv(RELEASE_ENV, str(release))
    again = DaemonRunner(agentd_home)
    again.start()
    try:
        wait_for(lambda: _recall_state(again) == f"catching up {TAIL} messages", "the count")

        found = again.result("recall.search", {"query": "apple"})
        cli = run_agentctl("search", "apple")
        turn = again.call("chat", {"text": "do you remember apple?"})

        assert found["incomplete"] == not_yet(TAIL)
        assert "apple pie recipe" in [hit["text"] for hit in found["hits"]]
        assert cli.stderr.splitlines() == [f"({not_yet(TAIL)})"]
        assert "apple pie recipe" in cli.stdout
        (result,) = [line["data"] for line in turn if line.get("event") == "tool_result"]
        # and the turn's question and tool call, appended meanwhile, are not in yet either
        assert result["content"].splitlines()[0] == f"({not_yet(TAIL + 2)})"
        assert "apple pie recipe" in result["content"].splitlines()[1]

        release.touch()
        wait_for(lambda: _recall_state(again) == "ready", "the catch-up")
        complete = again.result("recall.search", {"query": "crumble", "limit": 1_000})
        assert complete["incomplete"] is None
        assert len(complete["hits"]) == TAIL
        assert "(index" not in run_agentctl("search", "crumble").stderr
    finally:
        release.touch()
        again.stop()


def test_a_restart_over_an_index_that_misses_nothing_is_ready_at_once(
    daemon: DaemonRunner, agentd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple pie recipe"})
    daemon.stop()  # an orderly stop writes every indexed message to the segments
    release = agentd_home / "release-the-catch-up"  # a catch-up reading a log waits for it
    monkeypatch.setattr("agentd.recall.client.RECALL_MODULE", "tests.support.held_recall")
    monkeypatch.setenv(RELEASE_ENV, str(release))
    again = DaemonRunner(agentd_home)
    again.start()
    try:
        found = again.result("recall.search", {"query": "apple"})
        state = _recall_state(again)

        assert found["incomplete"] is None
        assert "apple pie recipe" in [hit["text"] for hit in found["hits"]]
        assert state == "ready"
    finally:
        release.touch()
        again.stop()


def test_a_restart_reads_a_short_tail_before_it_answers(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple pie recipe"})
    (agent,) = daemon.result("status")["agents"]
    daemon.stop()
    _written_after_the_stop(agentd_home, agent["id"], 3)
    again = DaemonRunner(agentd_home)
    again.start()
    try:
        found = again.result("recall.search", {"query": "crumble"})
        state = _recall_state(again)

        assert found["incomplete"] is None
        assert len(found["hits"]) == 3
        assert state == "ready"
    finally:
        again.stop()
