"""The event loop never waits for a file lock: a conversation whose reflection state a
worker holds waits alone, while ``status`` and every other conversation are answered."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from shared.store.locks import file_lock
from tests.support.daemon import DaemonRunner
from tests.support.memory_lock import descriptors_on, wait_for


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
    answers: dict[str, Any] = {}

    def ask(name: str, op: str, params: dict[str, Any] | None = None) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update({name: daemon.result(op, params)}))
        thread.start()
        return thread

    with file_lock(lock):  # a worker writing this conversation's reflection state
        held_up = ask("held up", "chat", {"text": "again"})
        wait_for(lambda: descriptors_on(lock) == 2, "the turn to wait for the state lock")
        others = [
            ask("status", "status"),
            ask("other", "chat", {"conversation": other, "text": "meanwhile"}),
        ]
        for thread in others:
            thread.join(20)
        answered_meanwhile = sorted(answers)
    held_up.join(30)

    assert answered_meanwhile == ["other", "status"]
    assert answers["held up"]["stop_reason"] == "end_turn"
