"""``agentctl chat`` asks in place about a call that waits for approval: the real agentctl
on a pseudo-terminal, against the daemon in this worker (tests/daemon/conftest.py), the
mock model calling ``bash`` when told to "run `CMD`", which the agent's settings say needs
a yes; what the model read of the call's result is what the mock answers (``The command
printed: …`` / ``The command did not run: …``). Keys typed ahead need the turn held before
its question: a model on the scripted OpenAI-compatible server, held there, does that."""

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
from shared.home import agentd_home
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion, tool_call
from tests.support.processes import run_agentctl
from tests.support.terminal import CTRL_D, ENTER, Terminal
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

TOUCHING = "echo ran >> count.txt; echo touched"
TOUCH = json.dumps({"command": TOUCHING})
ASK = f"run `{TOUCHING}`"
"""What makes the mock model call ``bash`` with :data:`TOUCH`."""


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def make_ada() -> dict[str, Any]:
    for args in (("agents", "create", "ada"), ("agents", "update", "ada", "--approve", "bash")):
        assert run_agentctl(*args).returncode == 0
    shown = run_agentctl("agents", "show", "ada", "--json")
    return json.loads(shown.stdout)


@pytest.fixture
def ada(serving: DaemonRunner) -> dict[str, Any]:
    return make_ada()


@contextmanager
def chat() -> Iterator[Terminal]:
    terminal = Terminal("-m", "agentd.client", "chat", "--agent", "ada", env=dict(os.environ))
    try:
        yield terminal
    finally:
        terminal.close()


def runs(agent: dict[str, Any]) -> int:
    count = Layout(agentd_home()).workspace_dir(agent["id"]) / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def users() -> list[str]:
    """What the user said in ada's conversation: each line that reached the model."""
    shown = run_agentctl("messages", "--agent", "ada", "--json")
    return [m["content"] for m in json.loads(shown.stdout) if m["role"] == "user"]


def test_the_repl_asks_in_place_and_yes_runs_the_call_and_goes_on(
    ada: dict[str, Any],
) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type(ASK + ENTER)
        before = terminal.expect(f"run bash `{TOUCHING}`? [y/N] ")
        assert f"⚙ bash({TOUCH})  (awaiting approval " in before
        assert runs(ada) == 0
        terminal.type("y" + ENTER)
        carried = terminal.expect(PROMPT)
        assert "✓ touched" in carried and "The command printed: touched" in carried
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(ada) == 1


def test_words_at_the_question_deny_the_call_and_are_the_reason_the_model_reads(
    ada: dict[str, Any],
) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type(ASK + ENTER)
        terminal.expect("? [y/N] ")
        terminal.type("not now, it is being backed up" + ENTER)
        carried = terminal.expect(PROMPT)
        assert "✗ the user denied this call: not now, it is being backed up" in carried
        read = "The command did not run: the user denied this call: not now, it is being backed up"
        assert read in carried
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(ada) == 0


def test_a_call_left_waiting_by_chat_p_is_asked_about_when_the_repl_opens_it(
    ada: dict[str, Any],
) -> None:
    waits = run_agentctl("chat", "-p", ASK, "--agent", "ada")
    assert waits.returncode == 3
    with chat() as terminal:
        shown = terminal.expect("? [y/N] ")
        assert "1 tool call(s) of this conversation wait" in shown
        terminal.type("y" + ENTER)
        assert "The command printed: touched" in terminal.expect(PROMPT)
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    assert runs(ada) == 1


def test_ctrl_c_at_the_question_leaves_the_call_waiting(
    ada: dict[str, Any],
) -> None:
    with chat() as terminal:
        terminal.expect(PROMPT)
        terminal.type(ASK + ENTER)
        terminal.expect("? [y/N] ")
        terminal.interrupt()
        left = terminal.expect(PROMPT)
        assert "■ bash waits for your approval: agentctl approve " in left
        terminal.type(CTRL_D)
        assert terminal.exit_status() == 0
    waiting = run_agentctl("approvals", "--json")
    assert len(json.loads(waiting.stdout)) == 1 and runs(ada) == 0


def piped(lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.client", "chat", "--agent", "ada"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=ceiling(120),
        cwd=Path(os.sep),
    )


def test_piped_lines_stop_at_a_call_that_waits_with_exit_3_and_send_no_more(
    ada: dict[str, Any],
) -> None:
    first = piped(f"{ASK}\nand one more\n")

    assert first.returncode == 3
    assert "■ bash waits for your approval: agentctl approve " in first.stderr
    assert users() == [ASK], "the line after the waiting turn was sent"
    later = piped("and another thing\n")
    assert later.returncode == 1 and later.stderr.startswith("approval_pending: ")
    assert users() == [ASK] and runs(ada) == 0


@pytest.mark.sdk  # imports litellm
def test_keys_typed_while_the_turn_ran_answer_no_question_they_never_saw(
    daemon: DaemonRunner, server: FakeOpenAIServer
) -> None:
    """A ``y`` typed ahead for the next prompt must not approve a call asked about later
    (the scripted model holds the turn, so the keys are surely typed while it runs)."""
    daemon.start(
        model="openai/test-model", api_base=server.url, api_key="sk-test", context_window=32000
    )
    ada = make_ada()
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]), hang_after=0)
    server.enqueue(body=chat_completion("Left it alone."))
    with chat() as terminal:
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
    assert runs(ada) == 0
