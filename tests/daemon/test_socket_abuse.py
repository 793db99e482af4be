"""Clients that misbehave on the socket hurt only themselves: one that stops reading, one
that half-closes, a thousand that connect at once, one that connects and says nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon.listener import listen_at
from shared.errors import ClientError
from shared.home import socket_path
from shared.models.agents import MAX_CONTEXT_WINDOW
from shared.protocol import request
from shared.providers.scripted import ScriptedProvider, text_reply
from tests.daemon.test_chat import SlowProvider, _last_logged
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling, wait_for


def _raw(timeout_s: float = 30.0) -> socket.socket:
    """A connected socket whose reads give up after a ceiling of ``timeout_s``. A full
    listen queue refuses a connect with a timeout at once (EAGAIN), so that is retried
    as long."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(ceiling(timeout_s))

    def connected() -> bool:
        try:
            sock.connect(str(socket_path()))
        except BlockingIOError:
            return False
        return True

    wait_for(connected, "the daemon to accept a connection", timeout_s=timeout_s, poll_s=0.01)
    return sock


def _lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    """Every line the daemon sends until it closes the connection."""
    buffer = b""
    while chunk := sock.recv(65536):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from (json.loads(line) for line in complete if line)


def _logged(home: Path) -> list[tuple[str, str]]:
    (path,) = home.glob("agents/*/conversations/*/messages.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["role"], r["content"]) for r in records if r["role"] in ("user", "assistant")]


def test_a_client_that_stops_reading_is_dropped_and_its_conversation_goes_on(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    huge = "x" * 1_000_000  # more than the socket and the write buffer hold together
    provider = ScriptedProvider(
        [text_reply(huge), text_reply("after you")], context_window=MAX_CONTEXT_WINDOW
    )
    daemon.start(provider=provider, write_timeout_s=0.5)
    daemon.result("agent.show")
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    stalled.connect(str(socket_path()))
    stalled.sendall(request("stalled", "chat", {"text": "I will not read"}))
    wait_for(lambda: daemon.result("status")["active_turns"] == 1, "the stalled turn to start")

    other = daemon.connect()
    other.sock.settimeout(30)
    answer = other.result("chat", {"text": "my turn"})

    assert answer["text"] == "after you"
    assert [(role, len(text)) for role, text in _logged(agentd_home)] == [
        ("user", len("I will not read")),
        ("assistant", len(huge)),
        ("user", len("my turn")),
        ("assistant", len("after you")),
    ]
    other.close()
    stalled.close()


def test_a_client_that_half_closes_after_its_requests_gets_every_answer(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    sock = _raw(timeout_s=60)
    ids = [f"{op}{i}" for i in range(20) for op in ("status", "chat")]
    sock.sendall(
        b"".join(
            request(i, "status") if i.startswith("status") else request(i, "chat", {"text": i})
            for i in ids
        )
    )
    sock.shutdown(socket.SHUT_WR)

    answered = [line["id"] for line in _lines(sock) if line.get("ok") is True]

    assert sorted(answered) == sorted(ids)
    sock.close()


def test_a_half_closed_client_that_then_goes_away_has_its_turn_cancelled(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start(provider=SlowProvider([], delay_s=30))
    daemon.result("agent.show")
    sock = _raw()
    sock.sendall(request("r1", "chat", {"text": "never mind"}))
    sock.shutdown(socket.SHUT_WR)
    wait_for(lambda: daemon.result("status")["active_turns"] == 1, "the turn to start")

    sock.close()

    wait_for(
        lambda: _last_logged(agentd_home).get("stop_reason") == "cancelled",
        "the turn to be cancelled",
    )


def _hello_or_busy(sock: socket.socket) -> str:
    """``ok`` if the daemon answered hello, else the code of the error it sent."""
    with contextlib.suppress(BrokenPipeError):  # a refused one may be closed already
        sock.sendall(request("h", "hello"))
    reply = next(_lines(sock))
    return "ok" if reply["ok"] else reply["error"]["code"]


def _served_once_more() -> bool:
    with contextlib.closing(_raw()) as sock:
        return _hello_or_busy(sock) == "ok"


@pytest.fixture
def low_open_file_limit() -> Iterator[int]:
    """The soft limit at 1,024 (the usual default), restored after the test; the hard
    limit must allow both ends of 1,100 connections in this one process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2_500:
        pytest.skip(f"needs 2,500 open files (this process holds both ends); hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1_024, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connections_over_the_cap_are_told_busy_and_the_rest_are_served(
    daemon: DaemonRunner, low_open_file_limit: int
) -> None:
    daemon.start()
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_open_file_limit

    connections = [_raw(timeout_s=10) for _ in range(1_100)]
    outcomes = Counter(_hello_or_busy(sock) for sock in connections)
    for sock in connections:
        sock.close()

    assert outcomes == {"ok": 1_000, "busy": 100}

    def served_once_the_closes_are_seen() -> dict[str, Any] | None:
        try:  # the daemon frees a slot when it reads a closed connection's end
            return daemon.result("hello")
        except ClientError as exc:
            if exc.code != "busy":
                raise
            return None

    assert wait_for(served_once_the_closes_are_seen, "a slot")["service"] == "agentd"


def test_a_client_connection_the_daemon_closed_while_idle_is_reopened_for_the_next_request(
    daemon: DaemonRunner,
) -> None:
    daemon.start(idle_timeout_s=0.2)
    connection = daemon.connect()  # what the interactive `agentctl chat` holds between turns
    assert connection.result("hello")["service"] == "agentd"
    wait_for(lambda: daemon.result("status")["connections"] == 1, "the idle connection to close")

    assert connection.result("hello")["service"] == "agentd"
    connection.close()


def test_agentctl_over_the_cap_says_the_daemon_is_busy(daemon: DaemonRunner) -> None:
    daemon.start(max_connections=1)
    held = _raw()

    refused = run_agentctl("status")

    assert refused.returncode == 1
    assert refused.stderr.startswith("busy: agentd is serving its limit of 1 connections")
    held.close()


def test_the_socket_file_appears_only_once_the_daemon_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that finds the socket is answered, never refused: bound at its path, the
    file was there before the daemon listened (a start-up race CI caught)."""
    path = tmp_path / "agentd.sock"
    there_at_listen: list[bool] = []

    class Recording(socket.socket):
        def listen(self, *args: Any) -> None:
            there_at_listen.append(path.exists())
            super().listen(*args)

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    async def bind_then_connect() -> bytes:
        server = await asyncio.start_unix_server(answer, sock=listen_at(path, backlog=8))
        reader, writer = await asyncio.open_unix_connection(str(path))
        line = await reader.readline()
        writer.close()
        server.close()
        await server.wait_closed()
        return line

    monkeypatch.setattr(socket, "socket", Recording)
    assert asyncio.run(bind_then_connect()) == b"hello\n"
    assert there_at_listen and there_at_listen[0] is False
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["agentd.sock"], "a staging name was left"


@pytest.mark.slow
def test_a_daemon_with_few_file_descriptors_refuses_connections_instead_of_hanging(
    agentd_home: Path,
) -> None:
    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    daemon = subprocess.Popen(
        [sys.executable, "-m", "agentd.cli", "serve"],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=few_files,
    )
    try:
        wait_for(socket_path().exists, "the daemon to listen")
        try:
            connections = [_raw(timeout_s=10) for _ in range(150)]
        except OSError as exc:  # say why the daemon stopped listening, from its own log
            log = agentd_home / "logs" / "agentd.log"
            tail = log.read_text().splitlines()[-20:] if log.exists() else []
            said = "\n".join(tail)
            raise AssertionError(f"{exc!r}; daemon exit {daemon.poll()}; log:\n{said}") from exc
        outcomes = Counter(_hello_or_busy(sock) for sock in connections)
        for sock in connections:
            sock.close()
        assert set(outcomes) == {"ok", "busy"}
        assert sum(outcomes.values()) == 150
        # the daemon frees a slot once it has read each hang-up: a client retries busy
        wait_for(_served_once_more, "a connection served after the burst hung up")
    finally:
        daemon.terminate()
        daemon.wait(ceiling(20))
    logged = [json.loads(line) for line in (agentd_home / "logs" / "agentd.log").open()]
    ran_out = [
        r["event"][:80] for r in logged if r["level"] == "error" or "descriptors" in r["event"]
    ]
    assert ran_out == [], "a burst within the cap must never exhaust the daemon's descriptors"


def test_an_idle_connection_is_closed_but_one_awaiting_an_answer_is_not(
    daemon: DaemonRunner,
) -> None:
    daemon.start(idle_timeout_s=0.2, mock_latency_s=0.6)
    idle = _raw(timeout_s=10)
    waiting = daemon.connect()

    answer = waiting.result("chat", {"text": "take a second"})

    assert answer["stop_reason"] == "end_turn"
    assert idle.recv(1) == b"", "the idle connection is closed by the daemon"
    waiting.close()
    idle.close()
