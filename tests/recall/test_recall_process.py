"""Recall runs in a process of its own (``agentd/recall/process.py``): the daemon outlives
it, a new one finds every message, including those appended while none ran, and it does
not outlive the daemon."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from agentd.recall.client import RecallClient, RecallProcess, spawn_recall_process
from shared.errors import RecallUnavailable
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.reporting_recall import REPORT_ENV
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc")


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _texts(daemon: DaemonRunner, query: str) -> list[str]:
    return [hit["text"] for hit in daemon.result("recall.search", {"query": query})["hits"]]


def _started_with(daemon: DaemonRunner, text: str) -> tuple[RecallClient, int]:
    """A daemon that has been told ``text``, its recall link, and its recall process."""
    recall = daemon.start().recall
    daemon.result("chat", {"text": text})
    wait_for(lambda: recall.pid is not None, "the recall process to start")
    assert recall.pid is not None
    return recall, recall.pid


def _recall_ready(daemon: DaemonRunner) -> bool:
    status = daemon.result("status")
    return all(agent["recall"]["state"] == "ready" for agent in status["agents"])


def test_a_killed_recall_process_is_replaced_and_what_was_appended_meanwhile_is_found(
    daemon: DaemonRunner,
) -> None:
    recall, first = _started_with(daemon, "the staging database listens on port 5433")

    os.kill(first, signal.SIGKILL)
    daemon.result("chat", {"text": "the deploy key is in vault"})  # while it is down
    wait_for(lambda: recall.pid not in (None, first), "a new recall process")
    wait_for(lambda: _recall_ready(daemon), "its catch-up")

    assert _texts(daemon, "deploy key vault").count("the deploy key is in vault") == 1
    assert _texts(daemon, "staging port").count("the staging database listens on port 5433") == 1
    assert not _running(first)


@pytest.mark.slow
def test_a_search_the_dying_process_held_fails_with_a_typed_error_and_the_daemon_serves_on(
    daemon: DaemonRunner,
) -> None:
    recall, stuck = _started_with(daemon, "the deploy key is in vault")
    os.kill(stuck, signal.SIGSTOP)  # it reads nothing more: the next search waits on it
    answers: list[list[dict[str, Any]]] = []
    searching = threading.Thread(
        target=lambda: answers.append(daemon.call("recall.search", {"query": "deploy key"}))
    )
    searching.start()
    calls = lambda: daemon.result("status")["recall_process"]["calls_waiting"]  # noqa: E731
    wait_for(lambda: calls() == 1, "the search to wait on the stopped process")
    os.kill(stuck, signal.SIGKILL)
    searching.join(ceiling(30))

    ((final, *_),) = answers
    assert final["ok"] is False and final["error"]["code"] == "recall_unavailable"
    assert "try again" in final["error"]["message"]
    wait_for(lambda: recall.pid not in (None, stuck), "a new recall process")
    wait_for(lambda: _recall_ready(daemon), "its catch-up")
    assert _texts(daemon, "deploy key").count("the deploy key is in vault") == 1


@pytest.mark.slow
def test_the_recall_process_ends_with_a_daemon_killed_outright(agentd_home: Path) -> None:
    agentd = AgentdProcess().start()
    try:
        status = json.loads(run_agentctl("status", "--json").stdout)
        recall = status["recall_process"]["pid"]
        assert recall is not None and _running(recall)
        agentd.kill()
        wait_for(lambda: not _running(recall), "the recall process to end", timeout_s=15)
    finally:
        agentd.stop()


def test_an_orderly_stop_ends_the_recall_process(daemon: DaemonRunner) -> None:
    _, pid = _started_with(daemon, "hello")
    daemon.stop()
    assert not _running(pid)


def test_the_recall_process_is_out_of_reach_of_signals_to_the_daemons_process_group(
    daemon: DaemonRunner,
) -> None:
    """A terminal's Ctrl-C and a stop signal to the group reach every process in it; the
    recall process must outlive them until its daemon has had it write its segments."""
    _, pid = _started_with(daemon, "the deploy key is in vault")

    assert os.getpgid(pid) == pid != os.getpgid(0)


def test_a_call_that_cannot_be_sent_fails_alone_and_recall_serves_on(
    daemon: DaemonRunner,
) -> None:
    """A request recall cannot carry (here: a lock, which no pickle takes) is refused with
    a typed error; the frames after it still go, in order."""
    started = daemon.start()
    daemon.result("chat", {"text": "the deploy key is in vault"})
    assert daemon.loop is not None

    async def unsendable() -> object:
        return await started.recall.search("agent", threading.Lock())  # type: ignore[arg-type]

    with pytest.raises(RecallUnavailable):
        asyncio.run_coroutine_threadsafe(unsendable(), daemon.loop).result(30)
    assert _texts(daemon, "deploy key").count("the deploy key is in vault") == 1


def test_a_status_asked_while_the_process_is_being_started_is_answered_by_it(
    tmp_path: Path,
) -> None:
    """The sender thread starts the process at the first ``open`` (here held until the
    status has been asked): the status waits for that process rather than saying the
    index is not open, and a stop meanwhile ends it."""
    release = threading.Event()

    def held(sock: socket.socket, args: list[str]) -> RecallProcess:
        release.wait(ceiling(10))
        return spawn_recall_process(sock, args)

    recall = RecallClient(Settings(home=tmp_path), spawn=held)
    recall.open(["agent-a"])

    async def asked_then_released() -> dict[str, object]:
        status = asyncio.create_task(recall.status("agent-a"))
        await asyncio.sleep(0)  # the status has been asked: it waits for an answer now
        release.set()
        return await status

    async def stopped() -> None:
        await recall.close()

    assert asyncio.run(asked_then_released())["state"] in ("opening", "ready")
    pid = recall.pid
    assert pid is not None
    assert os.getpgid(pid) == pid != os.getpgid(0)  # as the forked ones of the tests' daemons
    asyncio.run(stopped())
    wait_for(lambda: not _running(pid), "the recall process to end")


def test_a_forked_recall_process_has_the_daemons_environment_and_directory_and_no_more_imports(
    daemon: DaemonRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The tests' daemons fork their recall process from a forkserver started earlier, with
    another environment and directory (``tests/support/forked_recall.py``). A new one
    started after a kill has what the daemon has now, runs in a group of its own, and
    loads neither the recall client nor the settings (what made each start cost 0.1 s)."""
    recall, first = _started_with(daemon, "apple pie recipe")
    report = tmp_path / "report.json"
    monkeypatch.setattr("agentd.recall.client.RECALL_MODULE", "tests.support.reporting_recall")
    monkeypatch.setenv(REPORT_ENV, str(report))
    monkeypatch.chdir(tmp_path)

    os.kill(first, signal.SIGKILL)

    wait_for(report.exists, "the new recall process's report")
    started = json.loads(report.read_text())
    wait_for(lambda: recall.pid == started["pid"], "the daemon to hold the new process")
    assert started["pgid"] == started["pid"] != os.getpgid(0)
    assert (started["cwd"], started["report"]) == (str(tmp_path), str(report))
    assert "agentd.recall.client" not in started["modules"]
    assert "shared.settings" not in started["modules"]
    wait_for(lambda: "apple pie recipe" in _texts(daemon, "apple"), "the new process to serve")
