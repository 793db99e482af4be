"""``agentd up`` gives up only on a crash loop: a child killed after it ran a while is
restarted however often that happens (an OOM killer, a stray kill -9), while one that
dies right after every start stops the stack instead of spinning."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentd.stack import supervisor
from agentd.stack.supervisor import Child, Stack
from shared.settings import Settings
from tests.support.waiting import ceiling, wait_for


def _watching(stack: Stack) -> threading.Thread:
    watcher = threading.Thread(target=stack._watch, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.slow
def test_a_child_killed_after_running_a_while_is_always_restarted(
    agentd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "EARLY_DEATH_S", 0.3)
    stack = Stack(Settings(home=agentd_home))
    child = Child("sleeper", "37", lambda: subprocess.Popen(["sleep", "60"]))
    child.start()
    stack.children = [child]
    watcher = _watching(stack)
    try:
        for _ in range(supervisor.MAX_RESTARTS + 3):
            wait_for(
                lambda: time.monotonic() - child.started_at > supervisor.EARLY_DEATH_S,
                "the child to outlive an early death",
                timeout_s=1,
            )
            assert child.process is not None
            killed = child.process
            killed.kill()
            wait_for(
                lambda gone=killed: child.process is not gone, "the killed child to be restarted"
            )
        assert watcher.is_alive() and not stack._stopping.is_set()
    finally:
        stack._stopping.set()
        watcher.join(ceiling(5))
        if child.process is not None:
            child.process.kill()
            child.process.wait()


def test_a_child_that_dies_at_every_start_stops_the_stack_and_up_exits_1(
    agentd_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    external_redis = "redis://127.0.0.1:9/0"  # nothing to start before the children
    stack = Stack(Settings(home=agentd_home, redis_url=external_redis))
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    child = Child("broken", "37", lambda: subprocess.Popen(failing))

    def spawn_the_broken_child() -> None:
        child.start()
        stack.children.append(child)

    monkeypatch.setattr(stack, "_spawn_all", spawn_the_broken_child)

    assert stack.run() == 1
    assert len(child.restarts) == supervisor.MAX_RESTARTS
    assert "giving up after 5 restarts in a minute" in capsys.readouterr().out
