"""The web view in a real browser (Debian's Chromium through Playwright): log in with the
token, read a memory file's provenance gutter and follow a line to its source message,
chat and watch the reply stream in, and see the guard refuse what it must. Each page
visited is saved as a screenshot (see ``tests/web/browser.py``).

One browser serves the whole module; each test gets its own daemon and browser context.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from shared.providers.scripted import text_reply, tool_reply
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.waiting import ceiling
from tests.web.browser import BROWSER_TESTS, REBOUND_HOST, screenshot_path
from tests.web.site import REFLECTION_LINE, TURN_LINE, Site, serve_site

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
pytestmark = BROWSER_TESTS
TIMEOUT_MS = int(ceiling(30) * 1000)
"""A generous ceiling (see tests/support/waiting.py)."""


@pytest.fixture
def site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    return serve_site(daemon, clock)


@pytest.fixture
def page(browser: sync_api.Browser) -> Iterator[sync_api.Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 560})
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


def test_the_login_link_opens_the_dashboard_and_a_memory_line_leads_to_its_source_message(
    site: Site, page: sync_api.Page
) -> None:
    page.goto(site.login_url())
    assert page.url.endswith("/")
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.screenshot(path=screenshot_path("agents"), full_page=True)

    page.get_by_role("link", name="ada", exact=True).first.click()
    page.screenshot(path=screenshot_path("agent"), full_page=True)
    page.get_by_role("link", name="system/human.md").click()
    turn_mark = page.locator(".mark.kind-turn")
    reflection_mark = page.locator(".mark.kind-reflection")
    assert turn_mark.count() == 1 and reflection_mark.count() == 1
    assert page.locator(".mark.kind-initial").count() >= 1
    for mark, line in ((turn_mark, TURN_LINE), (reflection_mark, REFLECTION_LINE)):
        row = page.locator(".memory .row", has=mark)
        assert line.removeprefix("- ") in row.locator(".content").inner_text()

    reflection_mark.hover()
    assert "job-7" in reflection_mark.locator(".pop").inner_text()
    page.screenshot(path=screenshot_path("memory"), full_page=True)
    turn_mark.hover()
    popup = turn_mark.locator(".pop")
    assert popup.is_visible() and not reflection_mark.locator(".pop").is_visible()
    assert "turn" in popup.inner_text().lower() and "edit_file" in popup.inner_text()

    popup.locator("a.source").click()
    page.wait_for_url(f"**#{site.tool_call_message_id}")
    target = page.evaluate("document.querySelector(':target').id")
    assert target == site.tool_call_message_id
    assert "Noted: pnpm everywhere." in page.locator(".transcript").inner_text()
    page.screenshot(path=screenshot_path("source-message"), full_page=True)

    page.go_back()
    reflection_mark.hover()
    reflection_mark.locator("a.source").first.click()
    page.wait_for_url(f"**#{site.reflected[0]}")
    assert page.evaluate("document.querySelector(':target').id") == site.reflected[0]

    page.goto(f"http://127.0.0.1:{site.port}/agents/{site.agent_id}/timeline")
    reflection = page.locator(".commit.kind-reflection")
    assert "merged in 42.0 s" in reflection.inner_text()
    reflection.locator("summary").click()
    assert f"+{REFLECTION_LINE}" in reflection.locator("pre.diff .add").all_inner_texts()
    page.screenshot(path=screenshot_path("timeline"), full_page=True)

    page.goto(f"http://127.0.0.1:{site.port}/agents/{site.agent_id}/reflections")
    assert page.locator("figure.chart rect.status-merged").count() == 1
    assert "compaction-event" in page.locator("table.list").inner_text()
    page.screenshot(path=screenshot_path("reflections"), full_page=True)


def test_a_chat_message_streams_its_reply_and_search_finds_as_you_type(
    site: Site, page: sync_api.Page
) -> None:
    page.goto(site.login_url())
    page.goto(
        f"http://127.0.0.1:{site.port}/agents/{site.agent_id}/conversations/{site.conversation_id}"
    )
    assert page.locator("svg.gauge rect.g-floor").count() == 1
    assert "window" in page.locator("dl.numbers").inner_text()

    page.locator("#search input[type=search]").press_sequentially("pnpm")
    hit = page.locator("#hits li").first
    hit.wait_for()
    assert "pnpm" in hit.inner_text()

    site.provider.enqueue(
        tool_reply(("recall_search", json.dumps({"query": "pnpm"}))),
        text_reply("Streaming works."),
    )
    page.locator("#chat textarea").fill("Does the browser chat stream?")
    site.provider.hold_call_after(1)
    page.locator("#chat button").click()
    page.locator(".msg.live.call", has_text="recall_search").wait_for()
    page.locator(".msg.live.role-tool").wait_for()
    # The turn is not over: its second model call is held.
    page.locator("#chat-status", has_text="waiting for scripted…").wait_for()
    site.provider.release()
    page.locator(".msg.live.streamed", has_text="Streaming works.").wait_for()
    page.locator("#chat-status", has_text="turn finished: end_turn").wait_for()
    page.screenshot(path=screenshot_path("conversation"), full_page=True)

    newest = site.messages()
    assert newest[0]["content"] == "Streaming works."
    assert "Does the browser chat stream?" in [m["content"] for m in newest[:5]]


def test_requests_without_the_cookie_from_another_host_or_without_the_csrf_token_are_refused(
    site: Site, browser: sync_api.Browser, page: sync_api.Page
) -> None:
    stranger = browser.new_context()
    try:
        refused = stranger.new_page().goto(f"http://127.0.0.1:{site.port}/")
        assert refused is not None and refused.status == 401
    finally:
        stranger.close()

    page.goto(site.login_url())
    rebound = page.goto(f"http://{REBOUND_HOST}:{site.port}/")
    assert rebound is not None and rebound.status == 421

    conversation = f"/agents/{site.agent_id}/conversations/{site.conversation_id}"
    page.goto(f"http://127.0.0.1:{site.port}{conversation}")

    def sneaky_messages() -> int:
        return sum(m["content"] == "sneaky" for m in site.messages())

    post = """async ([url, token]) => {
        const headers = {"Content-Type": "application/json"};
        if (token !== null) headers["X-CSRF-Token"] = token;
        const response = await fetch(url, {method: "POST", headers,
                                           body: JSON.stringify({text: "sneaky"})});
        await response.text();  // the whole stream: the turn is over
        return response.status;
    }"""
    assert page.evaluate(post, [site.chat_path, None]) == 403
    assert page.evaluate(post, [site.chat_path, "not-the-token"]) == 403
    assert sneaky_messages() == 0

    site.provider.enqueue(text_reply("ok"))
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert page.evaluate(post, [site.chat_path, token]) == 200
    assert sneaky_messages() == 1
