"""The socket's ops are one table (``agentd.daemon.ops.OPS``): each op's row names its request
model, its handler and its reply model. The daemon checks every reply against its model
before sending it, so a handler that answers in another shape is a typed internal error
and the daemon serves on; the events a request streams are models too, and what a client
reads on the wire is exactly what they dump."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from pydantic import BaseModel

from agentd.daemon import ops, replies
from agentd.daemon.handlers import Handlers
from agentd.daemon.ops import OPS, Op
from agentd.daemon.requests import NoParams, Params
from shared.errors import InvalidReply
from shared.models import events
from shared.models.events import Emit, Event
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from tests.support.daemon import DaemonRunner
from tests.support.names import model_path

ROOT = Path(__file__).resolve().parents[2]


def test_every_op_has_one_row_that_a_grep_for_its_name_finds() -> None:
    source = (ROOT / "agentd" / "daemon" / "ops.py").read_text()
    for op, row in OPS.items():
        handler = row.handler.__name__
        assert re.search(rf'"{re.escape(op)}": Op\(\s*\w+, Handlers\.{handler}, ', source), op
        assert issubclass(row.params, Params), op
        assert issubclass(row.reply, BaseModel), op
        assert getattr(Handlers, handler) is row.handler, op


def test_each_rows_handler_takes_its_params_model_and_returns_its_reply_model() -> None:
    """What mypy cannot see through the table's ``Op[Any, Any]``: the row and its
    handler's annotations agree."""
    for op, row in OPS.items():
        hints = get_type_hints(row.handler)
        assert issubclass(row.params, hints["_params"] if "_params" in hints else hints["params"])
        assert hints["return"] is row.reply, f"{op}: {hints['return']} is not {row.reply}"


def test_the_server_dispatches_through_the_table_and_not_by_method_name() -> None:
    server = (ROOT / "agentd" / "daemon" / "server.py").read_text()
    assert "getattr(" not in server
    assert 'replace(".", "_")' not in server


@pytest.fixture
def patched_hello(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """``hello`` answering whatever the test puts in the list (the row's handler is
    swapped, its models kept)."""
    answers: list[object] = []

    async def answer(_handlers: Handlers, _params: NoParams, _emit: Emit) -> Any:
        return answers.pop(0)

    monkeypatch.setitem(OPS, "hello", Op(NoParams, answer, replies.Hello))
    yield answers


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param({"service": "agentd", "version": "1", "protocol": 1, "pid": 1}, id="a-dict"),
        pytest.param(replies.Uploaded(upload="u1", bytes=3), id="another-reply-model"),
        pytest.param(
            replies.Hello.model_construct(version="1", protocol="one", pid=1), id="bad-field"
        ),
        pytest.param(replies.Hello.model_construct(version="1", pid=1), id="missing-field"),
    ],
)
def test_a_handler_answering_in_the_wrong_shape_is_an_internal_error_and_the_daemon_serves_on(
    daemon: DaemonRunner, patched_hello: list[object], wrong: object
) -> None:
    daemon.start()
    patched_hello.append(wrong)

    (line,) = daemon.call("hello")

    assert line["ok"] is False
    assert line["error"]["code"] == "internal_error"
    assert "hello reply" in line["error"]["message"]
    assert "result" not in line
    assert daemon.result("agent.list") == {"agents": []}
    patched_hello.append(replies.Hello(version="9", protocol=1, pid=7))
    assert daemon.result("hello") == {"service": "agentd", "version": "9", "protocol": 1, "pid": 7}


def test_a_reply_changed_after_it_was_made_is_checked_too() -> None:
    hello = replies.Hello(version="1", protocol=1, pid=1)
    hello.pid = "not a pid"  # type: ignore[assignment]
    with pytest.raises(InvalidReply) as raised:
        ops.reply_of("hello", hello)
    assert raised.value.code == "internal_error"


def test_replies_keep_their_wire_names_and_key_order() -> None:
    shown = replies.ReflectionSettingsShown.model_validate(
        {"trigger": "step-count", "stepCount": 3, "merge": "auto"}
    )
    assert json.dumps(ops.reply_of("reflection.settings", shown)) == (
        '{"trigger": "step-count", "stepCount": 3, "merge": "auto"}'
    )
    diff = replies.MemoryChanges.model_validate(
        {"agent_id": "a", "from": "b", "to": "c", "commits": [], "diff": "", "truncated": False}
    )
    assert list(ops.reply_of("memory.diff", diff)) == [
        "agent_id",
        "from",
        "to",
        "commits",
        "diff",
        "truncated",
    ]


def _event_models() -> dict[str, type[Event]]:
    found: dict[str, type[Event]] = {}
    pending: list[type[Event]] = [Event]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__ == events.__name__:
                found.setdefault(sub.name, sub)
    return found


def test_every_event_a_chat_streams_is_the_dump_of_its_model(daemon: DaemonRunner) -> None:
    provider = ScriptedProvider()
    daemon.start(provider=provider)
    memory_dir = daemon.result("agent.create", {"name": "writer"})["memory_dir"]
    other = daemon.result("conversation.create", {"agent": "writer"})["id"]
    note = model_path(memory_dir, "notes/project.md")
    provider.enqueue(
        tool_reply(("write_file", json.dumps({"path": note, "content": "# notes\n- x\n"}))),
        text_reply("saved"),
        text_reply("hello there"),
    )
    lines = daemon.call("chat", {"agent": "writer", "text": "remember x"})
    lines += daemon.call("chat", {"agent": "writer", "text": "hi", "conversation": other})

    models = _event_models()
    streamed = [line for line in lines if "event" in line]
    names = [line["event"] for line in streamed]
    assert {"tool_call", "tool_result", "assistant", "memory_update"} <= set(names), names
    for line in streamed:
        model = models[line["event"]]
        assert model.model_validate(line["data"]).data() == line["data"], line
        assert list(model.model_validate(line["data"]).data()) == list(line["data"])
    (update,) = [line["data"] for line in streamed if line["event"] == "memory_update"]
    assert list(update) == ["from", "to", "files"] and update["files"] == ["notes/project.md"]


def test_an_event_refuses_a_field_its_model_does_not_have() -> None:
    with pytest.raises(ValueError, match="extra"):
        events.Waiting.model_validate({"reason": "busy", "why": "typo"})


def test_a_reply_holding_what_json_cannot_say_is_an_internal_error() -> None:
    log = replies.MemoryCommits(agent_id="a", commits=[{"sha": object()}])
    with pytest.raises(InvalidReply, match=r"memory\.log reply"):
        ops.reply_of("memory.log", log)
