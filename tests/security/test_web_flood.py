"""The web view's port under a flood of half-sent requests (the attack run's 1,100 at an
open-file limit of 1,024): it holds at most its cap of connections and answers the rest
``503``, chat on the Unix socket goes on, the log says so in a few lines, and the port
serves again once the flood is gone; a request head that never completes is closed after
``AGENTD_WEB_HEADER_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shared.home import socket_path
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess, final_answer, run_agentctl
from tests.support.waiting import ceiling, wait_for

FLOOD = 1_100
OPEN_FILES = 1_024
WEB_CAP = 64
"""``AGENTD_WEB_MAX_CONNECTIONS``' default, under an eighth of ``OPEN_FILES``."""
ACCEPT_EVENTS = {
    "accept_failed",
    "accept_out_of_descriptors",
    "connection_refused_busy",
    "socket.accept() out of system resource",
}


@pytest.fixture
def many_open_files() -> Iterator[None]:
    """This process holds every client end of the flood: its soft limit at the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2 * FLOOD:
        pytest.skip(f"needs {2 * FLOOD:,} open files for the flood's clients; hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _half_sent(port: int) -> socket.socket:
    """A connection that sends the start of a request head and never the rest."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=ceiling(30))
    with contextlib.suppress(OSError):  # refused and closed at once: still counted below
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Never-Ends: " % port)
    sock.setblocking(False)
    return sock


class Flood:
    """The flood's connections and what became of each: ``503`` (or closed by the
    server), or still held open by it."""

    def __init__(self, port: int) -> None:
        self.held = [_half_sent(port) for _ in range(FLOOD)]
        self.refused: list[bytes] = []

    def settle(self) -> bool:
        """Read what the server said on each held connection; True once no more than the
        cap are held and every other one was answered or closed."""
        still: list[socket.socket] = []
        for sock in self.held:
            try:
                said = sock.recv(4096)
            except BlockingIOError:
                still.append(sock)
                continue
            except OSError:
                said = b""  # reset after the 503 was sent
            self.refused.append(said)
            sock.close()
        self.held = still
        return len(self.held) <= WEB_CAP and len(self.held) + len(self.refused) == FLOOD

    def close(self) -> None:
        for sock in self.held:
            sock.close()


def _status_line(port: int) -> bytes:
    """The status line of one whole request to the web port ("" if it was not answered)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=ceiling(10)) as sock:
            sock.sendall(
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port
            )
            return sock.recv(4096).split(b"\r\n", 1)[0]
    except OSError:
        return b""


def _logged_events(home: Path) -> list[str]:
    lines = (home / "logs" / "agentd.log").read_text().splitlines()
    return [json.loads(line).get("event", "") for line in lines if line.startswith("{")]


@pytest.mark.slow
def test_half_sent_requests_past_the_cap_get_503_and_chat_on_the_socket_goes_on(
    agentd_home: Path, many_open_files: None
) -> None:
    daemon = AgentdProcess(open_file_limit=OPEN_FILES, AGENTD_WEB="127.0.0.1:0").start()
    try:
        login = final_answer(socket_path(agentd_home), "web.login")
        assert login is not None and login["ok"], login
        port = urlsplit(login["result"]["url"]).port
        assert port is not None

        flood = Flood(port)
        try:
            wait_for(flood.settle, "the web port to hold its cap and refuse the rest")
            chat = run_agentctl("chat", "-p", "still here while the web port is flooded?")
            refused_line = _status_line(port)
        finally:
            flood.close()
        wait_for(
            lambda: _status_line(port) not in (b"", b"HTTP/1.1 503 Service Unavailable"),
            "the web port to serve again once the flood is gone",
        )
    finally:
        daemon.stop()

    assert len(flood.held) == WEB_CAP
    assert any(said.startswith(b"HTTP/1.1 503 ") for said in flood.refused)
    assert refused_line == b"HTTP/1.1 503 Service Unavailable"
    assert chat.returncode == 0, chat.stderr
    assert "still here while the web port is flooded?" in chat.stdout
    accept_lines = [event for event in _logged_events(agentd_home) if event in ACCEPT_EVENTS]
    assert 1 <= len(accept_lines) <= 3, accept_lines


def test_a_request_head_that_never_ends_is_closed_after_the_header_timeout(
    daemon: DaemonRunner,
) -> None:
    daemon.start(web="127.0.0.1:0", web_header_timeout_s=0.5)
    port = daemon.daemon.web.port  # type: ignore[union-attr]
    slow = _half_sent(port)
    idle = socket.create_connection(("127.0.0.1", port), timeout=ceiling(30))
    idle.setblocking(False)

    def closed(sock: socket.socket) -> bool:
        try:
            return sock.recv(4096) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    wait_for(lambda: closed(slow) and closed(idle), "the server to close both", timeout_s=60)
    assert _status_line(port).startswith(b"HTTP/1.1 "), "a whole request is still answered"
    slow.close()
    idle.close()
