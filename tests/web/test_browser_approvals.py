"""Approve and Deny in a real browser (Debian's Chromium through Playwright), against a
daemon whose model is the scripted OpenAI-compatible server calling ``bash``: a chat that
stops on the gated call shows it with its controls at once, Approve streams the turn it
carries on, and a call waiting when the page loads is denied with a reason the model reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion, tool_call
from tests.support.waiting import ceiling
from tests.web.browser import BROWSER_TESTS, screenshot_path

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
pytestmark = BROWSER_TESTS
TIMEOUT_MS = int(ceiling(60) * 1000)
"""A generous ceiling (see tests/support/waiting.py): litellm answers the first call."""
TOUCH = json.dumps({"command": "echo ran >> count.txt; echo touched"})


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def ada(daemon: DaemonRunner, server: FakeOpenAIServer) -> dict[str, Any]:
    daemon.start(
        model="openai/test-model",
        api_base=server.url,
        api_key="sk-test",
        context_window=32_000,
        web="127.0.0.1:0",
    )
    daemon.result("agent.create", {"name": "ada"})
    return daemon.result("agent.update", {"agent": "ada", "requires_approval": ["bash"]})


@pytest.fixture
def page(browser: sync_api.Browser, daemon: DaemonRunner, ada: dict[str, Any]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    opened.goto(daemon.result("web.login")["url"])
    yield opened
    context.close()


def runs(home: Path, agent: dict[str, Any]) -> int:
    count = Layout(home).workspace_dir(agent["id"]) / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def conversation_url(daemon: DaemonRunner, agent: dict[str, Any]) -> str:
    port = daemon.daemon.web.port  # type: ignore[union-attr]
    return f"http://127.0.0.1:{port}/agents/{agent['id']}/conversations/{agent['default_conversation_id']}"


@pytest.mark.sdk  # imports litellm
def test_a_chat_that_waits_shows_approve_and_approve_streams_the_turn_it_carries_on(
    daemon: DaemonRunner,
    server: FakeOpenAIServer,
    ada: dict[str, Any],
    page: Any,
    agentd_home: Path,
) -> None:
    page.goto(conversation_url(daemon, ada))
    assert page.locator("#approvals").is_hidden()
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))

    page.locator("#chat textarea").fill("touch the file")
    page.locator("#chat button").click()

    page.locator("#chat-status", has_text="turn finished: requires_approval").wait_for()
    waiting = page.locator("#approvals form.approval")
    assert waiting.count() == 1 and page.locator("#approvals").is_visible()
    assert f"⚙ bash({TOUCH})" in waiting.inner_text()
    assert "awaiting approval" in page.locator(".msg.live.call").inner_text()
    assert runs(agentd_home, ada) == 0
    page.screenshot(path=screenshot_path("approval-waiting"), full_page=True)

    server.enqueue(body=chat_completion("Touched it."))
    waiting.get_by_role("button", name="Approve").click()

    page.locator(".msg.live.streamed", has_text="Touched it.").wait_for()
    page.locator("#chat-status", has_text="turn finished: end_turn").wait_for()
    assert page.locator("#approvals form.approval").count() == 0
    assert page.locator("#approvals").is_hidden()
    assert page.locator(".msg.live.role-tool", has_text="touched").count() == 1
    assert runs(agentd_home, ada) == 1
    assert daemon.result("approval.list")["approvals"] == []
    page.reload()
    assert page.locator("#approvals form.approval").count() == 0


@pytest.mark.sdk  # imports litellm
def test_a_call_waiting_when_the_page_loads_is_denied_with_a_reason_the_model_reads(
    daemon: DaemonRunner,
    server: FakeOpenAIServer,
    ada: dict[str, Any],
    page: Any,
    agentd_home: Path,
) -> None:
    server.enqueue(body=chat_completion(None, tool_calls=[tool_call("bash", TOUCH)]))
    stopped = daemon.result("chat", {"agent": "ada", "text": "touch the file"})
    assert stopped["stop_reason"] == "requires_approval"
    page.goto(conversation_url(daemon, ada))
    form = page.locator("#approvals form.approval")
    assert form.count() == 1 and f"⚙ bash({TOUCH})" in form.inner_text()

    server.enqueue(body=chat_completion("Leaving it alone."))
    form.locator('input[name="reason"]').fill("it is being backed up")
    form.get_by_role("button", name="Deny").click()

    page.locator(".msg.live.streamed", has_text="Leaving it alone.").wait_for()
    page.locator("#chat-status", has_text="turn finished: end_turn").wait_for()
    denial = "the user denied this call: it is being backed up"
    assert page.locator(".msg.live.role-tool.error", has_text=denial).count() == 1
    assert page.locator("#approvals form.approval").count() == 0
    assert server.requests[-1]["messages"][-1]["content"] == denial
    assert runs(agentd_home, ada) == 0
    page.screenshot(path=screenshot_path("approval-denied"), full_page=True)
