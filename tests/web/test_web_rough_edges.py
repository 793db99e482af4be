"""The web view where a new user found rough edges: reminders shown as the user's words,
"default" where the model belongs, no way back past the newest 100 messages, no
favicon, and ``agentd up --web`` announcing a URL it does not serve."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonRunner
from tests.support.waiting import ceiling, wait_for
from tests.web.site import WebClient

OLDER = re.compile(r'<a class="older" href="([^"]+)">Older messages</a>')
ARTICLE = re.compile(r'<article class="msg role-(\S+) kind-(\S+)" id="([^"]+)">')


@pytest.fixture
def web(daemon: DaemonRunner) -> WebClient:
    daemon.start(web="127.0.0.1:0")
    client = WebClient(daemon.daemon.web.port)  # type: ignore[union-attr]
    assert client.login(daemon.result("web.login")["url"]).status == 303
    return client


def transcript(web: WebClient, path: str) -> tuple[list[tuple[str, str, str]], str | None]:
    """The transcript's messages as (role class, kind, id), and the older-messages link."""
    page = web.get(path)
    assert page.status == 200, page.body
    older = OLDER.search(page.body)
    return ARTICLE.findall(page.body), older.group(1).replace("&amp;", "&") if older else None


def test_a_reminder_is_shown_as_the_harness_s_not_the_user_s(
    daemon: DaemonRunner, web: WebClient
) -> None:
    first = daemon.result("chat", {"text": "hello"})
    daemon.result("memory.write", {"path": "notes/x.md", "text": "---\ndescription: x\n---\nx\n"})
    daemon.result("chat", {"text": "and now?"})
    agent = daemon.result("agent.show")
    shown, _ = transcript(web, f"/agents/{agent['id']}/conversations/{first['conversation_id']}")
    assert ("reminder", "reminder") in [(who, kind) for who, kind, _ in shown]
    assert all(who == kind for who, kind, _ in shown if kind != "message")
    page = web.get(f"/agents/{agent['id']}/conversations/{first['conversation_id']}").body
    assert '<span class="role">reminder</span>' in page


def test_the_agents_list_names_each_agent_s_model(daemon: DaemonRunner, web: WebClient) -> None:
    daemon.result("agent.create", {"name": "ada"})
    daemon.result("agent.create", {"name": "bob", "model": "openai/gpt-4o"})
    page = web.get("/").body
    assert page.count('<td>mock <span class="meta">(the default, AGENTD_MODEL)</span></td>') == 1
    assert "<td>openai/gpt-4o</td>" in page
    assert "<td>default</td>" not in page


def test_older_messages_are_a_link_away_page_by_page(daemon: DaemonRunner, web: WebClient) -> None:
    for n in range(60):
        said = daemon.result("chat", {"text": f"message {n}"})
    conversation = said["conversation_id"]
    agent_id = daemon.result("agent.show")["id"]
    everything = daemon.result(
        "messages.list", {"conversation": conversation, "limit": 1000, "order": "asc"}
    )["messages"]
    assert len(everything) == 120

    newest, older = transcript(web, f"/agents/{agent_id}/conversations/{conversation}")
    assert [m[2] for m in newest] == [m["id"] for m in everything[20:]]
    assert older is not None
    oldest, none_left = transcript(web, older)
    assert [m[2] for m in oldest] == [m["id"] for m in everything[:20]]
    assert none_left is None
    assert "Newest messages" in web.get(older).body


def test_the_favicon_is_served_to_anyone(web: WebClient) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=ceiling(60))
    try:
        connection.request("GET", "/favicon.ico")  # no cookie: browsers ask on their own
        answer = connection.getresponse()
        body = answer.read()
    finally:
        connection.close()
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "image/x-icon"
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file's header


class Up:
    """``agentd up --web ADDRESS`` with its JSON lines in a file."""

    def __init__(self, home: Path, address: str) -> None:
        self.output = home / "up.out"
        env = {**os.environ, "AGENTD_WORKERS": "0", "AGENTD_LOG_FORMAT": "json"}
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentd.cli", "up", "--web", address],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def said(self, event: str) -> list[dict[str, str]]:
        lines = self.output.read_text().splitlines(keepends=True)
        records = [json.loads(line) for line in lines if line.endswith("\n")]
        return [r for r in records if r.get("process") == "up" and r.get("event") == event]

    def either(self, *events: str) -> dict[str, list[dict[str, str]]]:
        """Once one of ``events`` is said (the stack still running), what each said."""

        def any_said() -> bool:
            assert self.proc.poll() is None, self.output.read_text()
            return any(self.said(event) for event in events)

        wait_for(any_said, f"one of {events}", timeout_s=120)
        return {event: self.said(event) for event in events}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(ceiling(60))


@pytest.fixture
def taken_port() -> Iterator[int]:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1]
    holder.close()


@pytest.mark.slow
def test_up_says_there_is_no_web_view_when_its_port_is_taken(
    agentd_home: Path, taken_port: int
) -> None:
    up = Up(agentd_home, f"127.0.0.1:{taken_port}")
    try:
        said = up.either("web_view", "web_view_not_served")
        assert said["web_view"] == []
        (refused,) = said["web_view_not_served"]
        assert f"could not listen on 127.0.0.1:{taken_port}" in refused["message"]
    finally:
        up.stop()
    assert up.said("web_view") == []


@pytest.mark.slow
def test_up_announces_the_url_once_the_view_answers_there(agentd_home: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    up = Up(agentd_home, f"127.0.0.1:{port}")
    try:
        said = up.either("web_view", "web_view_not_served")
        (announced,) = said["web_view"]
        assert f"web view at http://127.0.0.1:{port}:" in announced["message"]
        page = WebClient(port).get("/")
        assert page.status == 401  # served: it asks for a login
    finally:
        up.stop()
