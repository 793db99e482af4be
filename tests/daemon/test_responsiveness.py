"""The event loop never waits for a file lock: a conversation whose reflection state a
worker holds waits alone, while ``status`` and every other conversation are answered."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
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


class SlowToBuild(ProviderFactory):
    """A factory whose first provider takes as long as the test says: a litellm model's
    first turn imports litellm (~5 s) while building it."""

    building = threading.Event()
    release = threading.Event()

    def _make(self, model: str, window: int | None) -> Provider:
        SlowToBuild.building.set()
        SlowToBuild.release.wait(120)
        return super()._make(model, window)


def test_building_a_provider_for_the_first_turn_does_not_stall_the_loop(
    daemon: DaemonRunner,
) -> None:
    daemon.start(providers=SlowToBuild)
    answers: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: answers.update(chat=daemon.result("chat", {"text": "hi"}))
    )
    first.start()
    try:
        assert SlowToBuild.building.wait(30), "the turn never asked for its provider"
        asking = threading.Thread(target=lambda: answers.update(status=daemon.result("status")))
        asking.start()
        asking.join(30)  # the build is still blocked: only a free event loop answers
        answered_while_building = "status" in answers
    finally:
        SlowToBuild.release.set()
        first.join(30)

    assert answered_while_building and answers["status"]["active_turns"] == 1
    assert answers["chat"]["stop_reason"] == "end_turn"
