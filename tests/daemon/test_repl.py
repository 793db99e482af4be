"""``agentctl chat`` without ``-p``, as a person uses it: the real agentctl on a
pseudo-terminal, talking to a real daemon on the mock model."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentd.client.repl import HISTORY_LINES, PROMPT
from shared.home import history_path
from shared.models.messages import Message, StopRecord
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import MockProvider
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.terminal import CTRL_D, ENTER, UP, Terminal
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

HOLD = "take your time"
BANNER = re.compile(r"(?P<agent>\S+) · conversation (?P<conversation>\S+) · model (?P<model>\S+)")


def heard(text: str) -> str:
    """The mock model's answer to ``text``."""
    return f"（mock）我听到了：{text}"


class MockThatHoldsOn(Provider):
    """The mock model, except that it thinks about :data:`HOLD` until the turn is
    cancelled; ``holding`` is set once it has started to."""

    def __init__(self) -> None:
        self.mock = MockProvider()
        self.model = self.mock.model
        self.context_window = self.mock.context_window
        self.holding = threading.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user" and HOLD in request.messages[-1].content:
            self.holding.set()
            await asyncio.Event().wait()
        return await self.mock.complete(request)


@pytest.fixture
def model(daemon: DaemonRunner) -> MockThatHoldsOn:
    provider = MockThatHoldsOn()
    daemon.start(provider=provider)
    return provider


@contextmanager
def chat(*args: str) -> Iterator[Terminal]:
    terminal = Terminal("-m", "agentd.client", "chat", *args, env=dict(os.environ))
    try:
        yield terminal
    finally:
        terminal.close()


def banner(terminal: Terminal) -> dict[str, str]:
    """The banner printed before the next prompt."""
    match = BANNER.search(terminal.expect(PROMPT))
    assert match is not None, terminal.text
    return match.groupdict()


def said(home: Path, agent_id: str, conversation_id: str) -> list[str]:
    """What the user said in a conversation, from its log."""
    log = Layout(home).conversation_files(agent_id, conversation_id).messages
    messages = [Message.parse_line(line) for line in log.read_text().splitlines()]
    return [m.content for m in messages if m.role == "user"]


def test_a_session_names_whom_it_talks_to_and_remembers_what_was_typed(
    model: MockThatHoldsOn, daemon: DaemonRunner, agentd_home: Path
) -> None:
    with chat() as terminal:
        shown = banner(terminal)
        agent = daemon.result("agent.show")
        assert shown == {
            "agent": "default",
            "conversation": agent["default_conversation_id"],
            "model": "mock",
        }
        terminal.type("hello there" + ENTER)
        terminal.expect(heard("hello there"))
        terminal.expect(PROMPT)
        terminal.type("second line" + ENTER)
        terminal.expect(PROMPT)
        terminal.type(UP + UP + ENTER)  # the line before last, said again
        terminal.expect(heard("hello there"))
        terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0

    history = history_path()
    assert history.stat().st_mode & 0o777 == 0o600
    assert history.read_text().splitlines() == ["hello there", "second line", "hello there"]
    with chat() as terminal:  # the next session recalls the last one's lines
        terminal.expect(PROMPT)
        terminal.type(UP + UP + ENTER)
        terminal.expect(heard("second line"))
        terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert said(agentd_home, agent["id"], agent["default_conversation_id"]) == [
        "hello there",
        "second line",
        "hello there",
        "second line",
    ]


def test_commands_start_a_conversation_switch_agents_and_leave(
    model: MockThatHoldsOn, daemon: DaemonRunner, agentd_home: Path
) -> None:
    coder = daemon.result("agent.create", {"name": "coder"})
    with chat() as terminal:
        first = banner(terminal)
        terminal.type("/help" + ENTER)
        assert "/agent NAME" in terminal.expect(PROMPT)
        terminal.type("/nope" + ENTER)
        assert "unknown command /nope: /help lists the commands" in terminal.expect(PROMPT)

        terminal.type("/new" + ENTER)
        fresh = banner(terminal)
        assert fresh["agent"] == "default" and fresh["conversation"] != first["conversation"]
        terminal.type("in the new one" + ENTER)
        terminal.expect(heard("in the new one"))
        terminal.expect(PROMPT)

        terminal.type("/agent coder" + ENTER)
        switched = banner(terminal)
        assert switched["agent"] == "coder"
        terminal.type("/agent ghost" + ENTER)
        assert "unknown_agent" in terminal.expect(PROMPT)
        terminal.type("to the coder" + ENTER)
        terminal.expect(heard("to the coder"))
        terminal.expect(PROMPT)
        terminal.type("/exit" + ENTER)
        assert terminal.exit_status() == 0

    default_id = daemon.result("agent.show")["id"]
    assert said(agentd_home, default_id, first["conversation"]) == []
    assert said(agentd_home, default_id, fresh["conversation"]) == ["in the new one"]
    assert said(agentd_home, coder["id"], switched["conversation"]) == ["to the coder"]
    assert (
        switched["conversation"]
        == daemon.result("agent.show", {"agent": "coder"})["default_conversation_id"]
    )


def test_ctrl_c_cancels_the_turn_then_discards_a_line_then_leaves(
    model: MockThatHoldsOn, daemon: DaemonRunner, agentd_home: Path
) -> None:
    with chat() as terminal:
        where = banner(terminal)
        terminal.type(HOLD + ENTER)
        assert model.holding.wait(ceiling(60)), "the turn never reached the model"
        terminal.interrupt()
        terminal.expect("■ turn cancelled")
        terminal.expect(PROMPT)
        terminal.type("still here?" + ENTER)  # the same session, on a new connection
        terminal.expect(heard("still here?"))

        terminal.expect(PROMPT)
        terminal.type("half a thought")
        terminal.expect("half a thought")
        terminal.interrupt()  # discards the line, keeps the session
        terminal.expect(PROMPT)
        terminal.interrupt()  # on an empty line: leaves
        assert terminal.exit_status() == 0

    agent_id = daemon.result("agent.show")["id"]
    log = Layout(agentd_home).conversation_files(agent_id, where["conversation"]).messages
    logged = [Message.parse_line(line) for line in log.read_text().splitlines()]
    assert (logged[0].role, logged[0].content) == ("user", HOLD)
    assert isinstance(logged[1], StopRecord) and logged[1].stop_reason == "cancelled"
    assert [m.content for m in logged[2:]] == ["still here?", heard("still here?")]
    assert "half a thought" not in history_path().read_text()


def test_lines_piped_in_are_turns_without_prompt_or_banner(
    model: MockThatHoldsOn, daemon: DaemonRunner, agentd_home: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentd.client", "chat"],
        input="first\n\nsecond\n",
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )
    assert (result.returncode, result.stdout) == (0, f"{heard('first')}\n{heard('second')}\n")
    assert not history_path().exists()


def test_the_history_file_keeps_only_the_latest_lines(
    model: MockThatHoldsOn, agentd_home: Path
) -> None:
    old = [f"old line {n}" for n in range(HISTORY_LINES)]
    history_path().write_text("\n".join(old) + "\n")
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type("/help" + ENTER)
        terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert history_path().read_text().splitlines() == [*old[1:], "/help"]
