"""``agentctl chat`` asks in place about a call that waits for approval: the real agentctl
on a pseudo-terminal, the real agentd, a model on the scripted OpenAI-compatible server
calling ``bash``, which the agent's settings say needs a yes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentd.client.repl import PROMPT
from shared.store.layout import Layout
from tests.support.openai_server import FakeOpenAIServer, chat_completion, tool_call
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.terminal import CTRL_D, ENTER, Terminal
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

TOUCH = json.dumps({"command": "echo ran >> count.txt; echo touched"})


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def agentd(server: FakeOpenAIServer) -> Iterator[AgentdProcess]:
    process = AgentdProcess(
        AGENTD_MODEL="openai/test-model",
        AGENTD_API_BASE=server.url,
        AGENTD_API_KEY="sk-test",
        AGENTD_CONTEXT_WINDOW="32000",
    ).start(timeout_s=120)
    yield process
    process.stop()


@pytest.fixture
def ada(agentd: AgentdProcess) -> dict[str, Any]:
    for args in (("agents", "create", "ada"), ("agents", "update", "ada", "--approve", "bash")):
        assert run_agentctl(*args, env=agentd.env).returncode == 0
    return json.loads(run_agentctl("agents", "show", "ada", "--json", env=agentd.env).stdout)


@contextmanager
def chat(agentd: AgentdProcess) -> Iterator[Terminal]:
    terminal = Terminal("-m", "agentd.client", "chat", "--agent", "ada", env=agentd.env)
    try:
        yield terminal
    finally:
        terminal.close()


def runs(agentd: AgentdProcess, agent: dict[str, Any]) -> int:
    count = Layout(agentd.home).workspace_dir(agent["id"]) / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def test_the_repl_asks_in_place_and_yes_runs_the_call_and_goes_on(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))
    server.enqueue(body=chat_completion("Touched it."))
    with chat(agentd) as terminal:
        terminal.expect(PROMPT)
        terminal.type("touch the file" + ENTER)
        before = terminal.expect("run bash `echo ran >> count.txt; echo touched`? [y/N] ")
        assert f"⚙ bash({TOUCH})  (awaiting approval " in before
        assert runs(agentd, ada) == 0 and len(server.requests) == 1
        terminal.type("y" + ENTER)
        carried = terminal.expect(PROMPT)
        assert "✓ touched" in carried and "Touched it." in carried
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(agentd, ada) == 1
    assert server.requests[1]["messages"][-1]["content"] == "touched"


def test_words_at_the_question_deny_the_call_and_are_the_reason_the_model_reads(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))
    server.enqueue(body=chat_completion("I will leave it."))
    with chat(agentd) as terminal:
        terminal.expect(PROMPT)
        terminal.type("touch the file" + ENTER)
        terminal.expect("? [y/N] ")
        terminal.type("not now, it is being backed up" + ENTER)
        carried = terminal.expect(PROMPT)
        assert "✗ the user denied this call: not now, it is being backed up" in carried
        assert "I will leave it." in carried
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(agentd, ada) == 0
    told = server.requests[1]["messages"][-1]
    assert told["content"] == "the user denied this call: not now, it is being backed up"


def test_a_call_left_waiting_by_chat_p_is_asked_about_when_the_repl_opens_it(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))
    waits = run_agentctl("chat", "-p", "touch the file", "--agent", "ada", env=agentd.env)
    assert waits.returncode == 3
    server.enqueue(body=chat_completion("Done now."))
    with chat(agentd) as terminal:
        shown = terminal.expect("? [y/N] ")
        assert "1 tool call(s) of this conversation wait" in shown
        terminal.type("y" + ENTER)
        assert "Done now." in terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(agentd, ada) == 1


def test_ctrl_c_at_the_question_leaves_the_call_waiting(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))
    with chat(agentd) as terminal:
        terminal.expect(PROMPT)
        terminal.type("touch the file" + ENTER)
        terminal.expect("? [y/N] ")
        terminal.interrupt()
        left = terminal.expect(PROMPT)
        assert "■ bash waits for your approval: agentctl approve " in left
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    waiting = run_agentctl("approvals", "--json", env=agentd.env)
    assert len(json.loads(waiting.stdout)) == 1 and runs(agentd, ada) == 0


def piped(agentd: AgentdProcess, lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.client", "chat", "--agent", "ada"],
        input=lines,
        env=agentd.env,
        capture_output=True,
        text=True,
        timeout=ceiling(120),
        cwd=Path(os.sep),
    )


def test_piped_lines_stop_at_a_call_that_waits_with_exit_3_and_send_no_more(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))

    first = piped(agentd, "touch the file\nand one more\n")

    assert first.returncode == 3
    assert "■ bash waits for your approval: agentctl approve " in first.stderr
    assert len(server.requests) == 1, "the line after the waiting turn was sent"
    later = piped(agentd, "and another thing\n")
    assert later.returncode == 1 and later.stderr.startswith("approval_pending: ")
    assert len(server.requests) == 1 and runs(agentd, ada) == 0


def test_keys_typed_while_the_turn_ran_answer_no_question_they_never_saw(
    agentd: AgentdProcess, server: FakeOpenAIServer, ada: dict[str, Any]
) -> None:
    """A ``y`` typed ahead for the next prompt must not approve a call asked about later."""
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]), hang_after=0)
    server.enqueue(body=chat_completion("Left it alone."))
    with chat(agentd) as terminal:
        terminal.expect(PROMPT)
        terminal.type("touch the file" + ENTER)
        assert server.holding.wait(ceiling(60)), "the turn never reached the model"
        terminal.type("y" + ENTER)  # typed ahead, before any question
        server.release()
        terminal.expect("? [y/N] ")
        terminal.type(ENTER)  # nothing: deny
        carried = terminal.expect(PROMPT)
        assert "✗ the user denied this call" in carried and "Left it alone." in carried
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(agentd, ada) == 0
