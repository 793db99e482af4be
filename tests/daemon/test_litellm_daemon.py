"""The daemon on a real litellm model over real HTTP: tool calls printed and a rate limit
waited out, as the real agentctl shows them from the daemon in this worker
(tests/daemon/conftest.py); and, of a real ``agentd serve``, a kill -9 in the middle of a
turn loses no complete message, and a process started without a key says what to set."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.models.messages import Message
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import (
    FakeOpenAIServer,
    chat_completion,
    error_body,
    tool_call,
    usage,
)
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def serving(daemon: DaemonRunner, server: FakeOpenAIServer) -> DaemonRunner:
    """The daemon in this worker, its model litellm speaking to ``server``."""
    daemon.start(
        model="openai/test-model", api_base=server.url, api_key="sk-test", context_window=32000
    )
    return daemon


@pytest.fixture
def agentd(server: FakeOpenAIServer) -> Iterator[AgentdProcess]:
    """``agentd serve`` on the same settings, for the test that kills it."""
    process = AgentdProcess(
        AGENTD_MODEL="openai/test-model",
        AGENTD_API_BASE=server.url,
        AGENTD_API_KEY="sk-test",
        AGENTD_CONTEXT_WINDOW="32000",
    ).start()
    yield process
    process.stop()


def _log(home: Path) -> list[Message]:
    (path,) = home.glob("agents/*/conversations/*/messages.jsonl")
    return [Message.parse_line(line) for line in path.read_text().splitlines()]


@pytest.mark.sdk  # imports litellm
def test_tool_calls_and_results_are_printed_then_the_answer(
    serving: DaemonRunner, server: FakeOpenAIServer
) -> None:
    server.enqueue(
        body=chat_completion(
            None, tool_calls=[tool_call("bash", '{"command": "echo hi"}')], usage=usage(900, 12)
        )
    )
    server.enqueue(body=chat_completion("The command printed hi.", usage=usage(950, 8)))

    result = run_agentctl("chat", "-p", "run echo hi")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        '  ⚙ bash({"command": "echo hi"})',
        "  ✓ hi",
        "The command printed hi.",
    ]
    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[3]["content"] == "hi"


def test_kill_9_mid_turn_loses_no_complete_message(
    agentd: AgentdProcess, server: FakeOpenAIServer, agentd_home: Path
) -> None:
    server.enqueue(
        body=chat_completion(None, tool_calls=[tool_call("bash", '{"command": "echo persisted"}')])
    )
    server.enqueue(body=chat_completion("too late"), delay_s=ceiling(60))
    chat = subprocess.Popen(
        [sys.executable, "-m", "agentd.client", "chat", "-p", "work slowly"],
        env=agentd.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the daemon's first litellm import is seconds of CPU
    wait_for(lambda: len(server.requests) >= 2, "the turn's second model call", timeout_s=60)
    assert len(server.requests) == 2

    agentd.kill()
    chat.wait(ceiling(10))

    messages = _log(agentd_home)
    assert [(m.role, m.kind) for m in messages] == [
        ("user", "message"),
        ("assistant", "message"),
        ("tool", "message"),
    ]
    assert messages[2].content == "persisted"

    restarted = AgentdProcess(**{k: v for k, v in agentd.env.items() if k.startswith("AGENTD_")})
    restarted.start()
    try:
        listing = run_agentctl("messages", "--order", "asc", "--json", env=restarted.env)
        assert [m["id"] for m in json.loads(listing.stdout)] == [m.id for m in messages]
        server.enqueue(body=chat_completion("back again"))
        again = run_agentctl("chat", "-p", "are you there?", env=restarted.env)
        assert again.stdout.strip() == "back again"
        resent = server.requests[-1]["messages"]
        assert [m["role"] for m in resent] == ["system", "user", "assistant", "tool", "user"]
    finally:
        restarted.stop()


@pytest.mark.sdk  # imports litellm
def test_a_rate_limit_shows_one_retry_line_and_the_answer_and_context_names_the_setting(
    serving: DaemonRunner, server: FakeOpenAIServer
) -> None:
    server.enqueue(status=429, body=error_body("slow down"), headers={"Retry-After": "1"})
    server.enqueue(body=chat_completion("there you are"))

    result = run_agentctl("chat", "-p", "hello")
    context = run_agentctl("context")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "there you are"
    assert result.stderr.splitlines() == ["  … retrying in 1 s (HTTP 429)"]
    assert len(server.requests) == 2
    assert "32,000 tokens (setting: AGENTD_CONTEXT_WINDOW)" in context.stdout


@pytest.mark.sdk  # imports litellm
@pytest.mark.usefixtures("no_provider_keys")
def test_no_api_key_and_an_unknown_window_say_what_to_set_without_calling_the_server(
    daemon: DaemonRunner, server: FakeOpenAIServer
) -> None:
    """The daemon in this worker, where litellm is loaded already: no key anywhere (litellm
    looks in the environment when the daemon was handed none)."""
    daemon.start(model="openai/test-model", api_base=server.url)

    first = run_agentctl("chat", "-p", "hello")
    second = run_agentctl("chat", "-p", "hello again")
    context = run_agentctl("context")

    assert first.returncode == 1
    warning, error = first.stderr.splitlines()
    assert warning.startswith("  ! the context window of openai/test-model is unknown")
    assert "128,000 tokens is assumed; set AGENTD_CONTEXT_WINDOW" in warning
    assert error.startswith("provider_auth: openai/test-model: no API key")
    assert "set OPENAI_API_KEY" in error
    assert second.stderr.splitlines() == [error]
    assert server.requests == []
    assert "128,000 tokens (default: the model's window is unknown" in context.stdout
