"""Kill -9 of the daemon while it commits recall's index, then restart: what was committed
is searched at once, the rest is read again from the logs, nothing is lost or doubled.

The kill lands inside the commit without any hook in agentd: the daemon and its recall
process (which commits) are killed together the moment a new segment file of tantivy's
appears in the index's directory while ``meta.json`` (which a commit replaces last, to
publish the segment) is still the one before, and a segment of 8,000 messages takes long
enough to write that the watch catches it (each attempt adds messages, so there is always
a segment left to write)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.client.connection import Connection
from shared.ids import new_id
from shared.models.messages import Message
from shared.recall.index import AgentIndex
from shared.store.jsonl import MessageLog
from shared.store.layout import Layout
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import wait_for

GROUP = 1_000
"""Messages per group word: a search for it must find exactly these (its limit is 1,000)."""
BATCH_GROUPS = 8
ATTEMPTS = 4
TIMEOUT_S = 60.0


def _append_groups(log: MessageLog, agent_id: str, conversation_id: str, first: int) -> None:
    log.append(
        Message.of(
            id=new_id("msg"),
            agent_id=agent_id,
            conversation_id=conversation_id,
            role="user",
            content=f"group{first + n // GROUP} item{n} some shared words",
        )
        for n in range(BATCH_GROUPS * GROUP)
    )


def _search(word: str) -> list[str]:
    connection = Connection()
    try:
        hits = connection.result("recall.search", {"query": word, "limit": GROUP})["hits"]
    finally:
        connection.close()
    return [hit["message_id"] for hit in hits]


def _status() -> dict[str, Any]:
    """What ``agentctl status --json`` shows, asked on the socket (a few milliseconds, and
    no process per look)."""
    connection = Connection()
    try:
        return connection.result("status", {})
    finally:
        connection.close()


def _recall_state() -> str:
    return str(_status()["agents"][0]["recall"]["state"])


def _wait_ready() -> None:
    wait_for(
        lambda: _recall_state() == "ready", "the recall index to catch up", timeout_s=TIMEOUT_S
    )


def _recall_pid() -> int:
    """The daemon's recall process, once it has started one."""
    pid: int = wait_for(
        lambda: _status()["recall_process"]["pid"],
        "the daemon to start a recall process",
        timeout_s=TIMEOUT_S,
    )
    return pid


def _persisted(layout: Layout, agent_id: str) -> int:
    """Documents the agent's committed index holds."""
    directory = layout.recall_files(agent_id).directory
    return len(AgentIndex(directory)) if (directory / "meta.json").exists() else 0


def _meta(directory: Path) -> bytes:
    try:
        return (directory / "meta.json").read_bytes()
    except FileNotFoundError:
        return b""


def _run_until_persisted(
    daemon: AgentdProcess, layout: Layout, agent_id: str, documents: int
) -> None:
    """Start, catch up and stop the daemon until ``documents`` are persisted: a stop
    writes only what is caught up, and a loaded machine can hold the catch-up's last
    step (at background priority) past the stop."""
    for _ in range(ATTEMPTS):
        daemon.start(timeout_s=TIMEOUT_S)
        _wait_ready()
        daemon.terminate()
        if _persisted(layout, agent_id) >= documents:
            return
    raise AssertionError(f"{documents} documents were never persisted by an orderly stop")


def _kill_both(daemon: AgentdProcess, recall: int) -> None:
    """Every process of the daemon at once: its recall process, the writer, first."""
    os.kill(recall, signal.SIGKILL)
    daemon.kill()


SEGMENT_FILES = (".idx", ".pos", ".term", ".store", ".fast", ".fieldnorm")


def _kill_inside_a_write(daemon: AgentdProcess, directory: Path) -> bool:
    """Start the daemon and kill -9 it once a new segment file exists; False if the
    commit publishing it was over (``meta.json`` replaced) before the kill."""
    before = set(os.listdir(directory))
    meta = _meta(directory)
    daemon.start(timeout_s=TIMEOUT_S)
    recall = _recall_pid()
    wait_for(
        lambda: any(name.endswith(SEGMENT_FILES) for name in set(os.listdir(directory)) - before),
        "the daemon to write a segment",
        timeout_s=TIMEOUT_S,
        poll_s=0,  # as soon as it shows: the kill should land inside the write
    )
    _kill_both(daemon, recall)
    return _meta(directory) == meta


@pytest.mark.slow
def test_a_kill_during_a_commit_loses_and_doubles_nothing(agentd_home: Path) -> None:
    daemon = AgentdProcess()
    daemon.start(timeout_s=TIMEOUT_S)
    assert run_agentctl("chat", "-p", "hello", env=daemon.env).returncode == 0
    _wait_ready()
    daemon.terminate()
    layout = Layout(agentd_home)
    (agent_dir,) = layout.agents_dir.iterdir()
    (conversation_dir,) = layout.conversations_dir(agent_dir.name).iterdir()
    log = MessageLog(layout.conversation_files(agent_dir.name, conversation_dir.name).messages)
    _append_groups(log, agent_dir.name, conversation_dir.name, 0)
    first_batch = _persisted(layout, agent_dir.name) + BATCH_GROUPS * GROUP
    _run_until_persisted(daemon, layout, agent_dir.name, first_batch)

    groups = BATCH_GROUPS
    landed = False
    for _ in range(ATTEMPTS):
        _append_groups(log, agent_dir.name, conversation_dir.name, groups)
        groups += BATCH_GROUPS
        if _kill_inside_a_write(daemon, layout.recall_files(agent_dir.name).directory):
            landed = True
            break
    assert landed, f"no kill of {ATTEMPTS} landed inside a commit"

    daemon.start(timeout_s=TIMEOUT_S)
    try:
        assert len(set(_search("group0"))) == GROUP  # persisted: found before the catch-up
        _wait_ready()
        found: list[str] = []
        for group in range(groups):
            ids = _search(f"group{group}")
            assert len(ids) == GROUP, f"group{group}: {len(ids)} hits"
            found += ids
        assert len(found) == len(set(found)) == groups * GROUP
    finally:
        daemon.stop()
