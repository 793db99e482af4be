"""The event loop never waits for a file: a conversation whose reflection state a worker
holds, or whose disk write stalls, waits alone, while ``status`` and every other
conversation are answered."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from shared.store.jsonl import MessageLog
from shared.store.locks import file_lock
from tests.support.daemon import DaemonRunner
from tests.support.memory_lock import descriptors_on
from tests.support.waiting import ceiling, wait_for


class Requests:
    """Requests sent from threads, and the answers that came back."""

    def __init__(self, daemon: DaemonRunner) -> None:
        self.daemon = daemon
        self.answers: dict[str, Any] = {}

    def send(self, name: str, op: str, params: dict[str, Any] | None = None) -> threading.Thread:
        def call() -> None:
            self.answers[name] = self.daemon.result(op, params)

        thread = threading.Thread(target=call)
        thread.start()
        return thread

    def answered_within(self, threads: list[threading.Thread], timeout_s: float) -> list[str]:
        for thread in threads:
            thread.join(timeout_s)
        return sorted(self.answers)


def test_a_held_state_lock_holds_up_only_its_own_conversation(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    first = daemon.result("chat", {"text": "hello"})
    agent = daemon.result("agent.show")
    other = daemon.result("conversation.create")["id"]
    lock = (
        agentd_home
        / "agents"
        / agent["id"]
        / "conversations"
        / first["conversation_id"]
        / "reflection-state.lock"
    )
    requests = Requests(daemon)

    with file_lock(lock):  # a worker writing this conversation's reflection state
        held_up = requests.send("held up", "chat", {"text": "again"})
        wait_for(lambda: descriptors_on(lock) == 2, "the turn to wait for the state lock")
        meanwhile = [
            requests.send("status", "status"),
            requests.send("other", "chat", {"conversation": other, "text": "meanwhile"}),
        ]
        answered_meanwhile = requests.answered_within(meanwhile, 20)
    held_up.join(ceiling(30))

    assert answered_meanwhile == ["other", "status"]
    assert requests.answers["held up"]["stop_reason"] == "end_turn"


def test_a_stalled_log_write_holds_up_only_its_own_turn(
    daemon: DaemonRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "hello"})
    writing, resume = threading.Event(), threading.Event()
    append = MessageLog.append

    def stalled_append(log: MessageLog, messages: Any) -> Any:
        if not writing.is_set():
            writing.set()
            assert resume.wait(ceiling(30)), "the test never let the write finish"
        return append(log, messages)

    monkeypatch.setattr(MessageLog, "append", stalled_append)
    requests = Requests(daemon)

    held_up = requests.send("held up", "chat", {"text": "again"})
    assert writing.wait(ceiling(30))
    answered_meanwhile = requests.answered_within([requests.send("status", "status")], 20)
    resume.set()
    held_up.join(ceiling(30))

    assert answered_meanwhile == ["status"]
    assert requests.answers["held up"]["stop_reason"] == "end_turn"
