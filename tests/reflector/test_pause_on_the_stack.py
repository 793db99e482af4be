"""A paused agent on the real stack: the daemon, an embedded Valkey and a Celery worker
whose reflector model is served (404, unknown model) by a local OpenAI-compatible server.
The pause is named where the user looks — the next chat (once), ``agentctl status``
(readable and ``--json``) and the web view — and lifts when the worker's model changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.models.reflection import ReflectionOutcome
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, error_body
from tests.support.processes import run_agentctl
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests, WorkerProcess
from tests.web.site import WebClient

pytestmark = pytest.mark.slow

MODEL = "openai/reflector-model"


@pytest.fixture
def stack(agentd_home: Path) -> Iterator[dict[str, Any]]:
    parts: dict[str, Any] = {"workers": []}
    with FakeOpenAIServer() as server:
        parts["server"] = server
        parts["redis"] = RedisForTests(agentd_home).start()
        yield parts
        for worker in parts["workers"]:
            worker.stop()
        parts["redis"].stop()


def _chat(daemon: DaemonRunner, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The reflection notices and the warnings one chat turn streamed."""
    lines = daemon.call("chat", {"text": text})
    assert lines[-1]["ok"], lines[-1]
    return (
        [line["data"] for line in lines if line.get("event") == "reflection"],
        [line["data"] for line in lines if line.get("event") == "warning"],
    )


def _outcomes(home: Path) -> list[ReflectionOutcome]:
    logs = list(home.glob("agents/*/reflections/log.jsonl"))
    lines = logs[0].read_text().splitlines() if logs else []
    return [ReflectionOutcome.model_validate_json(line) for line in lines]


def test_an_unknown_reflector_model_is_named_by_the_next_chat_once_by_status_and_the_web_view(
    daemon: DaemonRunner, agentd_home: Path, stack: dict[str, Any]
) -> None:
    server: FakeOpenAIServer = stack["server"]
    server.enqueue(
        status=404,
        body=error_body("The model `reflector-model` does not exist", code="model_not_found"),
    )
    env = {"AGENTD_REFLECTION_MODEL": MODEL, "AGENTD_API_BASE": server.url}
    stack["workers"].append(WorkerProcess(agentd_home, AGENTD_API_KEY="sk-test", **env).start())
    daemon.start(reflection_wait_s=30, web="127.0.0.1:0")
    daemon.result("reflection.settings", {"trigger": "step-count", "step_count": 2})

    assert _chat(daemon, "帮我看下这个报错") == ([], [])
    told, warned = _chat(daemon, "我更喜欢用 tabs 缩进")

    assert told == []  # the failure that paused it is told by the pause's warning
    (warning,) = warned
    assert warning["code"] == "reflection_paused"
    status = daemon.result("status")
    (agent,) = status["agents"]
    name = agent["name"]
    assert warning["message"].startswith(
        f"automatic reflection of {name} is paused (provider_config): {MODEL}: "
    )
    assert "does not exist" in warning["message"]
    assert f"`agentctl reflect --agent {name}` retries now" in warning["message"]
    assert _chat(daemon, "今天我们决定以后一律用 pnpm") == ([], [])
    wait_for(
        lambda: any(o.reason == "configuration_error" for o in _outcomes(agentd_home)),
        what="a later trigger to find the agent paused",
    )
    assert _chat(daemon, "还有别的吗") == ([], [])

    paused = daemon.result("status")["agents"][0]["reflection_paused"]
    assert (paused["reason"], paused["resume"]) == (
        "provider_config",
        f"agentctl reflect --agent {name}",
    )
    readable = run_agentctl("status")
    assert readable.returncode == 0, readable.stderr
    assert f"! automatic reflection of {name} is paused (provider_config)" in readable.stdout
    assert "last failed (provider_config) at" in readable.stdout
    as_json = json.loads(run_agentctl("status", "--json").stdout)
    assert as_json["agents"][0]["reflection_paused"]["reason"] == "provider_config"
    web = daemon.daemon.web  # type: ignore[union-attr]
    client = WebClient(web.port)
    assert client.login(daemon.result("web.login")["url"]).status == 303
    for page in (f"/agents/{agent['id']}", f"/agents/{agent['id']}/reflections"):
        body = client.get(page).body
        assert "Automatic reflection is paused" in body and "does not exist" in body, page
        assert f"<code>agentctl reflect --agent {name}</code> retries now" in body, page
    assert "reflection paused</a>" in client.get("/").body

    stack["workers"].pop().stop()
    mock = WorkerProcess(agentd_home, "w2", AGENTD_REFLECTION_MODEL="mock")
    stack["workers"].append(mock.start())
    told, warned = _chat(daemon, "记住：我用 vim")

    assert [n["status"] for n in told] == ["merged"] and warned == []
    assert daemon.result("status")["agents"][0]["reflection_paused"] is None
    assert "Automatic reflection is paused" not in client.get(f"/agents/{agent['id']}").body
