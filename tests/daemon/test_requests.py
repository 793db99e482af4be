"""Bad input on the socket gets a typed error, changes nothing, and the connection lives on."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from agentd.daemon.ops import OPS
from shared.errors import SocketPathTooLong
from shared.home import socket_path
from shared.protocol import MAX_REQUEST_BYTES
from tests.support.bounds import bounds, is_numeric
from tests.support.daemon import DaemonRunner


class RawConnection:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(socket_path()))
        self.sock.settimeout(30)  # a request that is never answered fails, not hangs
        self.reader = self.sock.makefile("rb")

    def send_line(self, data: bytes) -> dict[str, Any]:
        self.sock.sendall(data + b"\n")
        return json.loads(self.reader.readline())

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


@pytest.fixture
def raw(daemon: DaemonRunner) -> RawConnection:
    daemon.start()
    connection = RawConnection()
    yield connection
    connection.close()


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", "malformed_request"),
        (b"\xff\xfe", "malformed_request"),
        (b"[1, 2]", "malformed_request"),
        (b'{"id": "r1"}', "malformed_request"),
        (b'{"id": "r1", "op": "fly"}', "unknown_op"),
        (b'{"id": "r1", "op": "hello", "params": {"x": 1}}', "malformed_request"),
        (b'{"id": "r1", "op": "agent.show", "params": {"agent": "../../etc"}}', "invalid_id"),
        (b'{"id": "r1", "op": "agent.show", "params": {"agent": "ghost"}}', "unknown_agent"),
        (b'{"id": "r1", "op": "chat", "params": {"text": ""}}', "malformed_request"),
        (
            b'{"id": "r1", "op": "chat", "params": {"text": "hi", "conversation": "a/b"}}',
            "invalid_id",
        ),
        (b'{"id": "r1", "op": "messages.list", "params": {"limit": -1}}', "malformed_request"),
        (
            b'{"id": "r1", "op": "memory.show", "params": {"path": "../../agent.json"}}',
            "memory_path",
        ),
        pytest.param(
            b'{"id": "r1", "op": "hello", "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "malformed_request",
            id="nested-deeper-than-the-parser-recurses",
        ),
        pytest.param(
            b'{"id": "r1", "op": "agent.update", "params": {"context_window": 9'
            + b"9" * 5_000
            + b"}}",
            "malformed_request",
            id="an-integer-of-5000-digits",
        ),
        pytest.param(
            b'{"id": "r1", "op": "agent.update", "params": {"context_window": 1'
            + b"0" * 400
            + b"}}",
            "malformed_request",
            id="a-context-window-no-float-holds",
        ),
    ],
)
def test_bad_requests_get_a_typed_error_and_the_connection_keeps_working(
    raw: RawConnection, line: bytes, code: str
) -> None:
    reply = raw.send_line(line)
    assert reply["ok"] is False
    assert reply["error"]["code"] == code, reply
    assert reply["error"]["message"]
    assert raw.send_line(b'{"id": "r2", "op": "hello"}')["result"]["service"] == "agentd"


def test_every_numeric_parameter_of_every_op_has_bounds() -> None:
    unbounded = [
        f"{op}: {name}"
        for op, row in OPS.items()
        for name, info in row.params.model_fields.items()
        if is_numeric(info) and not ({"ge", "gt"} & bounds(info) and {"le", "lt"} & bounds(info))
    ]
    assert unbounded == []


def test_an_oversized_line_is_discarded_whole_and_the_next_request_is_served(
    raw: RawConnection,
) -> None:
    huge = b'{"id": "big", "op": "chat", "params": {"text": "' + b"x" * MAX_REQUEST_BYTES + b'"}}'
    reply = raw.send_line(huge)
    assert reply["error"]["code"] == "payload_too_large"
    assert raw.send_line(b'{"id": "r2", "op": "hello"}')["ok"] is True


def test_a_message_over_the_chat_limit_is_refused_before_anything_is_written(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start(max_message_chars=10)
    lines = daemon.call("chat", {"text": "x" * 11})
    assert lines[-1]["error"]["code"] == "payload_too_large"
    assert not list(agentd_home.glob("agents/*/conversations/*/messages.jsonl"))


def test_bad_requests_leave_no_agent_behind(raw: RawConnection, agentd_home: Path) -> None:
    raw.send_line(b'{"id": "r1", "op": "agent.create", "params": {"name": "a b"}}')
    raw.send_line(b'{"id": "r2", "op": "agent.create", "params": {"name": "ok", "extra": 1}}')
    assert not (agentd_home / "agents").exists() or not list((agentd_home / "agents").iterdir())


def test_several_requests_in_flight_on_one_connection_are_answered_by_id(
    raw: RawConnection,
) -> None:
    raw.sock.sendall(b'{"id": "a", "op": "hello"}\n{"id": "b", "op": "status"}\n')
    replies = {json.loads(raw.reader.readline())["id"] for _ in range(2)}
    assert replies == {"a", "b"}


def test_a_corrupt_agent_record_is_a_typed_error_and_no_second_agent_is_made(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    agent = daemon.result("agent.show")
    (agentd_home / "agents" / agent["id"] / "agent.json").write_text("{broken")

    reply = daemon.call("chat", {"text": "hi"})[-1]

    assert reply["error"]["code"] == "corrupt_state_file"
    assert "agent.json" in reply["error"]["message"]
    assert len(list((agentd_home / "agents").iterdir())) == 1
    assert daemon.result("hello")["service"] == "agentd"


def test_a_socket_path_too_long_for_unix_sockets_is_refused_with_advice(
    agentd_home: Path,
) -> None:
    runner = DaemonRunner(agentd_home / ("d" * 120))
    with pytest.raises(SocketPathTooLong, match="Set AGENTD_HOME to a shorter directory"):
        runner.start()
