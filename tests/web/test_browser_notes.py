"""Remember and Forget on a memory file's page in a real browser (Debian's Chromium through
Playwright): a note typed in lands as a line whose gutter mark says the user wrote it in
the web view; Forget lists the matching lines, and removes them only when confirmed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.waiting import ceiling
from tests.web.browser import BROWSER_TESTS, screenshot_path
from tests.web.site import TURN_LINE, Site, serve_site

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
pytestmark = BROWSER_TESTS
TIMEOUT_MS = int(ceiling(30) * 1000)
"""A generous ceiling (see tests/support/waiting.py)."""
HUMAN = "system/human.md"


@pytest.fixture
def site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    return serve_site(daemon, clock)


@pytest.fixture
def page(browser: sync_api.Browser, site: Site) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    opened.goto(site.login_url())
    opened.goto(f"http://127.0.0.1:{site.port}/agents/{site.agent_id}/memory?path={HUMAN}")
    yield opened
    context.close()


def _human(site: Site) -> str:
    return str(site.daemon.result("memory.show", {"agent": "ada", "path": HUMAN})["text"])


def test_a_note_typed_on_the_page_lands_with_a_mark_naming_the_web_view(
    site: Site, page: Any
) -> None:
    marks = page.locator(".mark.kind-user").count()

    page.get_by_label("note").fill("I take my coffee black")
    page.get_by_role("button", name="Remember").click()

    row = page.locator(".memory .row", has_text="I take my coffee black")
    row.wait_for()
    assert page.locator(".mark.kind-user").count() == marks + 1
    mark = row.locator(".mark.kind-user")
    mark.hover()
    assert "remembered by the user in the web view" in mark.locator(".pop").inner_text()
    assert _human(site).endswith("- I take my coffee black\n")
    page.screenshot(path=screenshot_path("memory-remember"), full_page=True)

    page.get_by_label("note").fill("I take my coffee black")
    page.get_by_role("button", name="Remember").click()
    status = page.locator("#notes-status")
    status.filter(has_text="holds this line already").wait_for()


def test_forget_lists_the_lines_and_removes_them_only_when_confirmed(site: Site, page: Any) -> None:
    before = site.daemon.result("memory.log", {"agent": "ada"})["commits"]

    page.get_by_label("forget lines containing").fill("pnpm")
    page.get_by_role("button", name="Find lines").click()

    listed = page.locator("#forget-lines li")
    listed.first.wait_for()
    assert listed.all_inner_texts() == [f"9: {TURN_LINE}"]
    assert site.daemon.result("memory.log", {"agent": "ada"})["commits"] == before
    page.screenshot(path=screenshot_path("memory-forget"), full_page=True)

    page.get_by_role("button", name="Forget these lines").click()

    page.locator(".memory .row", has_text="Uses pnpm").wait_for(state="detached")
    page.locator(".memory .row", has_text="Works on a TypeScript monorepo").wait_for()
    assert "pnpm" not in _human(site)
    [newest, *rest] = site.daemon.result("memory.log", {"agent": "ada"})["commits"]
    assert rest == before and newest["subject"] == 'forget: 1 line containing "pnpm"'


def test_a_refused_note_says_why_on_the_page(site: Site, page: Any) -> None:
    page.get_by_label("note").fill(" ")
    page.get_by_role("button", name="Remember").click()

    page.locator("#notes-status", has_text="malformed_request: the note is empty").wait_for()
