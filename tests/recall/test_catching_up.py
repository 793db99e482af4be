"""While the index catches up on the logs after a restart, a search answers over what is
open and says what it may miss: the model reads it in the tool's result, the user on
agentctl's stderr, and neither takes a partial answer for a whole one."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.ids import new_id
from shared.models.messages import Message
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.held_recall import RELEASE_ENV
from tests.support.processes import run_agentctl


def not_yet(count: int) -> str:
    return f"index catching up: {count} messages not searchable yet"


def _wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _recall_state(daemon: DaemonRunner) -> str:
    (agent,) = daemon.result("status")["agents"]
    return str(agent["recall"]["state"])


def _written_after_the_stop(home: Path, agent_id: str) -> None:
    """Three messages the stopped daemon never indexed (a tail to catch up on)."""
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
            for n in range(3)
        ]
    )


def test_a_search_while_the_index_catches_up_says_what_it_cannot_see_yet(
    daemon: DaemonRunner, agentd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple pie recipe"})
    (agent,) = daemon.result("status")["agents"]
    daemon.stop()
    _written_after_the_stop(agentd_home, agent["id"])
    release = agentd_home / "release-the-catch-up"
    monkeypatch.setattr("agentd.recall_client.RECALL_MODULE", "tests.support.held_recall")
    monkeypatch.setenv(RELEASE_ENV, str(release))
    again = DaemonRunner(agentd_home)
    again.start()
    try:
        _wait_for(lambda: _recall_state(again) == "catching up 3 messages")

        found = again.result("recall.search", {"query": "apple"})
        cli = run_agentctl("search", "apple")
        turn = again.call("chat", {"text": "do you remember apple?"})

        assert found["incomplete"] == not_yet(3)
        assert "apple pie recipe" in [hit["text"] for hit in found["hits"]]
        assert cli.stderr.splitlines() == [f"({not_yet(3)})"]
        assert "apple pie recipe" in cli.stdout
        (result,) = [line["data"] for line in turn if line.get("event") == "tool_result"]
        # and the turn's question and tool call, appended meanwhile, are not in yet either
        assert result["content"].splitlines()[0] == f"({not_yet(5)})"
        assert "apple pie recipe" in result["content"].splitlines()[1]

        release.touch()
        _wait_for(lambda: _recall_state(again) == "ready")
        complete = again.result("recall.search", {"query": "crumble"})
        assert complete["incomplete"] is None
        assert len(complete["hits"]) == 3
        assert "(index" not in run_agentctl("search", "crumble").stderr
    finally:
        release.touch()
        again.stop()
