"""``agentctl chat`` at a terminal where a new user found rough edges: the daemon gone
between two lines, and keys typed while a reply was still printing. The real agentctl on
a pseudo-terminal, a real daemon on the mock model."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentd.client.repl import PROMPT
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import MockProvider
from tests.support.daemon import DaemonRunner
from tests.support.terminal import CTRL_D, ENTER, Terminal
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

HOLD = "wait for it"


def heard(text: str) -> str:
    return f"（mock）我听到了：{text}"


class MockThatWaits(Provider):
    """The mock model, except that a message with :data:`HOLD` is answered only once
    ``release`` is set; ``holding`` is set when it starts waiting."""

    def __init__(self) -> None:
        self.mock = MockProvider()
        self.model = self.mock.model
        self.context_window = self.mock.context_window
        self.holding = threading.Event()
        self.release = threading.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user" and HOLD in request.messages[-1].content:
            self.holding.set()
            await asyncio.to_thread(self.release.wait, ceiling(60))
        return await self.mock.complete(request)


@pytest.fixture
def model(daemon: DaemonRunner) -> MockThatWaits:
    provider = MockThatWaits()
    daemon.start(provider=provider)
    return provider


@contextmanager
def chat() -> Iterator[Terminal]:
    terminal = Terminal("-m", "agentd.client", "chat", env=dict(os.environ))
    try:
        yield terminal
    finally:
        terminal.close()


def test_lines_typed_while_the_daemon_is_down_say_so_each_time_and_the_chat_goes_on(
    model: MockThatWaits, daemon: DaemonRunner
) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        daemon.stop()
        for line in ("anyone there?", "and now?"):
            terminal.type(line + ENTER)
            shown = terminal.expect(PROMPT)
            assert "not_running: agentd is not running" in shown, terminal.text
            assert "Traceback" not in shown and "ValueError" not in shown
        daemon.start(provider=model)
        terminal.type("back again" + ENTER)
        terminal.expect(heard("back again"))
        terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0


def test_a_line_typed_while_a_reply_prints_is_the_next_prompts_line(
    model: MockThatWaits,
) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type(HOLD + ENTER)
        assert model.holding.wait(ceiling(60)), "the turn never reached the model"
        terminal.type("typed ahead")
        model.release.set()
        reply = terminal.expect(heard(HOLD))
        assert "typed ahead" not in reply  # not echoed into the reply
        terminal.expect(PROMPT)
        terminal.expect("typed ahead")  # but on the next prompt's line, to edit or send
        terminal.type(ENTER)
        terminal.expect(heard("typed ahead"))
        terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0


def test_ctrl_d_typed_while_a_reply_prints_leaves_after_it(model: MockThatWaits) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type(HOLD + ENTER)
        assert model.holding.wait(ceiling(60)), "the turn never reached the model"
        terminal.type(CTRL_D)
        model.release.set()
        terminal.expect(heard(HOLD))
        assert terminal.exit_status() == 0
