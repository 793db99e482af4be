"""agentctl's ``… waiting for MODEL`` line when a Ctrl-C lands while its thread starts
(seen once in the suite: a ``RuntimeError: cannot join thread before it is started``
traceback instead of ``■ turn cancelled``)."""

from __future__ import annotations

import threading

import pytest

from agentd.client import live
from agentd.client.live import WaitingLine


def test_a_ctrl_c_while_the_line_starts_leaves_it_stoppable_and_nothing_drawn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[threading.Thread] = []
    real_start = threading.Thread.start

    def interrupted(thread: threading.Thread) -> None:
        started.append(thread)
        raise KeyboardInterrupt  # before the thread began, as a Ctrl-C in its start can

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    monkeypatch.setattr(live, "SHOW_AFTER_S", 0.0)
    line = WaitingLine()
    with pytest.raises(KeyboardInterrupt):
        line.start("mock")
    monkeypatch.setattr(threading.Thread, "start", real_start)

    line.stop()  # what the view's close does on the way out

    (thread,) = started
    thread.start()  # the thread begins after all, told to stop: it draws nothing
    thread.join()
    assert capsys.readouterr().err == ""
