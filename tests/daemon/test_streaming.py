"""Replies stream, as a user sees them: the daemon in this worker (tests/daemon/conftest.py)
on a real litellm model (the local OpenAI-compatible server streaming over HTTP) and the
real agentctl, on a pipe and on a pseudo-terminal. The text arrives while the model is
still writing, a pipe gets nothing but the text, a terminal is told how long the model is
waited on, a hung provider ends at the timeout, and Ctrl-C mid-stream keeps what arrived,
marked cancelled."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.models.messages import Message
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion
from tests.support.processes import run_agentctl
from tests.support.terminal import Terminal
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow

MODEL = "openai/test-model"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def start_agentd(daemon: DaemonRunner, server: FakeOpenAIServer) -> Callable[..., None]:
    def start(timeout_s: float = 120.0) -> None:
        daemon.start(
            model=MODEL,
            api_base=server.url,
            api_key="sk-test",
            context_window=32000,
            provider_timeout_s=timeout_s,
        )

    return start


def _log(home: Path) -> list[Message]:
    (path,) = home.glob("agents/*/conversations/*/messages.jsonl")
    return [Message.parse_line(line) for line in path.read_text().splitlines()]


def _agentctl(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentd.client", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _read_until(proc: subprocess.Popen[bytes], text: str, timeout_s: float = 60.0) -> bytes:
    """What ``proc`` printed on stdout up to and including ``text``."""
    assert proc.stdout is not None
    seen = b""
    limit = ceiling(timeout_s)
    deadline = time.monotonic() + limit
    while text.encode() not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {text!r} within {limit:.0f} s; stdout so far: {seen!r}"
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        if readable:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"stdout closed before {text!r}; it held {seen!r}"
            seen += chunk
    return seen


@pytest.mark.sdk  # imports litellm
def test_agentctl_prints_the_reply_while_the_model_writes_it_and_a_pipe_gets_only_the_text(
    start_agentd: Callable[..., None], server: FakeOpenAIServer, agentd_home: Path
) -> None:
    start_agentd()
    server.enqueue(
        body=chat_completion("Hello from the stream."),
        chunks=["Hello", " from", " the stream."],
        hang_after=2,
    )
    proc = _agentctl("chat", "-p", "say hello")
    try:
        early = _read_until(proc, "Hello from")
        assert server.holding.is_set(), "the model has not finished writing"
        assert proc.poll() is None
        server.release()
        rest, errors = proc.communicate(timeout=ceiling(60))
    finally:
        proc.kill()
        proc.wait()

    assert proc.returncode == 0
    assert (early + rest).decode() == "Hello from the stream.\n"
    assert errors == b"", "stderr is no terminal: no waiting line"
    replies = [m for m in _log(agentd_home) if m.role == "assistant"]
    assert [(m.content, m.stop_reason) for m in replies] == [("Hello from the stream.", "end_turn")]


@pytest.mark.sdk  # imports litellm
def test_a_terminal_is_shown_how_long_the_model_is_waited_on_until_it_writes(
    start_agentd: Callable[..., None], server: FakeOpenAIServer
) -> None:
    start_agentd()
    server.enqueue(body=chat_completion("Here it is."), hang_after=0)
    terminal = Terminal("-m", "agentd.client", "chat", "-p", "slow one", env=dict(os.environ))
    try:
        terminal.expect(f"… waiting for {MODEL} · 2 s")
        server.release()
        before = terminal.expect("Here it is.")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()

    assert before.endswith("\r\x1b[K"), "the waiting line is erased before the reply"


@pytest.mark.sdk  # imports litellm
def test_a_hung_provider_ends_at_the_configured_timeout_with_provider_timeout(
    start_agentd: Callable[..., None], server: FakeOpenAIServer, agentd_home: Path
) -> None:
    start_agentd(timeout_s=1.0)
    server.enqueue(body=chat_completion("never"), hang_after=0)

    result = run_agentctl("chat", "-p", "are you there?")

    assert result.returncode == 1
    assert result.stderr.startswith(
        f"provider_timeout: {MODEL}: the provider sent nothing for 1 s (AGENTD_PROVIDER_TIMEOUT_S)"
    ), result.stderr
    assert result.stdout == ""
    assert len(server.requests) == 1, "a hung provider is not asked again"
    stop = _log(agentd_home)[-1]
    assert (stop.kind, stop.stop_reason) == ("stop", "error")
    assert stop.payload is not None and stop.payload.code == "provider_timeout"


@pytest.mark.sdk  # imports litellm
def test_ctrl_c_mid_stream_cancels_the_turn_and_keeps_what_arrived_marked_cancelled(
    start_agentd: Callable[..., None], server: FakeOpenAIServer, agentd_home: Path
) -> None:
    start_agentd()
    server.enqueue(
        body=chat_completion("The first half and the rest"),
        chunks=["The first half", " and the rest"],
        hang_after=1,
    )
    terminal = Terminal("-m", "agentd.client", "chat", "-p", "tell me", env=dict(os.environ))
    try:
        terminal.expect("The first half")
        terminal.interrupt()
        assert terminal.exit_status() == 130
    finally:
        terminal.close()

    wait_for(lambda: _log(agentd_home)[-1].kind == "stop", "the cancelled turn's stop record")
    log = _log(agentd_home)
    assert [(m.role, m.kind, getattr(m, "stop_reason", None)) for m in log] == [
        ("user", "message", None),
        ("assistant", "message", "cancelled"),
        ("assistant", "stop", "cancelled"),
    ]
    assert log[1].content == "The first half"
    wait_for(lambda: server.disconnects == 1, "the model's stream closed by the cancelled turn")


def test_the_socket_streams_the_mock_reply_in_pieces_before_the_whole_reply(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    lines = daemon.call("chat", {"text": "我更喜欢用 tabs 缩进"})

    events = [(line["event"], line["data"]) for line in lines if "event" in line]
    names = [name for name, _ in events]
    assert names[0] == "model_call"
    pieces = [data["text"] for name, data in events if name == "assistant_delta"]
    assert len(pieces) == 3
    assert names[-1] == "assistant"
    assert "".join(pieces) == events[-1][1]["text"] == "（mock）我听到了：我更喜欢用 tabs 缩进"
    assert names.index("assistant") > max(i for i, n in enumerate(names) if n == "assistant_delta")
