"""Remember and Forget on a memory file's page over real HTTP to a real daemon: both need
the session and its CSRF token, answer for the agent in the URL through the web door
whatever the body says, and forget removes what was listed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.web.site import TURN_LINE, Response, Site, WebClient, serve_site

HUMAN = "system/human.md"


@pytest.fixture
def site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    return serve_site(daemon, clock)


def _post(client: WebClient, path: str, body: dict[str, Any], csrf: str | None) -> Response:
    headers = {"Content-Type": "application/json"}
    if csrf:
        headers["X-CSRF-Token"] = csrf
    return client.request("POST", path, json.dumps(body).encode(), headers)


def _log(site: Site) -> list[dict[str, Any]]:
    return site.daemon.result("memory.log", {"agent": "ada"})["commits"]


def _human(site: Site) -> str:
    return str(site.daemon.result("memory.show", {"agent": "ada", "path": HUMAN})["text"])


def test_the_memory_page_offers_remember_and_forget_for_its_file(site: Site) -> None:
    page = site.logged_in().get(f"/agents/{site.agent_id}/memory?path={HUMAN}").body

    assert f'data-url="/agents/{site.agent_id}/memory" data-path="{HUMAN}"' in page
    assert '<form id="remember"' in page and ">Remember</button>" in page
    assert '<form id="forget"' in page and ">Find lines</button>" in page


def test_remember_and_forget_need_the_session_and_its_csrf_token(site: Site) -> None:
    client, other = site.logged_in(), site.logged_in()
    before = _log(site)
    remember = f"/agents/{site.agent_id}/memory/remember"
    forget = f"/agents/{site.agent_id}/memory/forget"
    note = {"path": HUMAN, "text": "likes tea"}
    listing = {"path": HUMAN, "pattern": "pnpm", "confirm": True, "base": before[0]["sha"]}

    for path, body in ((remember, note), (forget, listing)):
        assert _post(site.client(), path, body, csrf="anything").status == 401
        assert _post(client, path, body, csrf=None).status == 403
        assert _post(client, path, body, csrf=other.csrf).status == 403
    assert _log(site) == before and "likes tea" not in _human(site)


def test_a_note_from_the_page_goes_to_the_agent_in_the_url_through_the_web(site: Site) -> None:
    other = site.daemon.result("agent.create", {"name": "bob"})
    client = site.logged_in()
    body = {"path": HUMAN, "text": "likes tea", "agent": other["id"], "via": "agentctl"}

    answer = _post(client, f"/agents/{site.agent_id}/memory/remember", body, client.csrf)

    assert answer.status == 200, answer.body
    done = answer.json()
    assert (done["agent_id"], done["line"]) == (site.agent_id, "- likes tea")
    assert _human(site).endswith("- likes tea\n")
    bob = site.daemon.result("memory.show", {"agent": "bob", "path": HUMAN})["text"]
    assert "tea" not in bob
    [match] = site.daemon.result("memory.why", {"agent": "ada", "text": "tea"})["matches"]
    assert (match["commit"]["provenance"]["kind"], match["commit"]["provenance"]["via"]) == (
        "user",
        "web",
    )
    page = client.get(f"/agents/{site.agent_id}/memory?path={HUMAN}").body
    assert "remembered by the user in the web view" in page
    assert 'class="mark kind-user"' in page


def test_forget_from_the_page_lists_then_removes_the_lines_shown(site: Site) -> None:
    client = site.logged_in()
    path = f"/agents/{site.agent_id}/memory/forget"

    listed = _post(client, path, {"path": HUMAN, "pattern": "PNPM"}, client.csrf).json()

    assert [line["text"] for line in listed["lines"]] == [TURN_LINE]
    body = {"path": HUMAN, "pattern": "PNPM", "confirm": True, "base": listed["head"]}
    done = _post(client, path, body, client.csrf)
    assert done.status == 200, done.body
    assert "pnpm" not in _human(site)
    [newest, *_] = _log(site)
    assert newest["sha"] == done.json()["commit"]
    assert newest["subject"] == 'forget: 1 line containing "PNPM"'


@pytest.mark.parametrize(
    ("action", "body", "status", "code"),
    [
        ("remember", {"path": HUMAN}, 400, "malformed_request"),
        ("remember", {"path": "../x.md", "text": "x"}, 400, "memory_path"),
        ("remember", {"path": HUMAN, "text": "x", "client": "evil"}, 400, "malformed_request"),
        ("forget", {"path": HUMAN, "pattern": "x", "confirm": True}, 400, "malformed_request"),
        ("forget", {"path": HUMAN, "pattern": "nothing here at all"}, 200, None),
    ],
)
def test_bad_requests_get_the_sockets_typed_error_as_json_and_change_nothing(
    site: Site, action: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    client = site.logged_in()
    before = _log(site)

    answer = _post(client, f"/agents/{site.agent_id}/memory/{action}", body, client.csrf)

    assert answer.status == status, answer.body
    if code is not None:
        assert answer.json()["error"]["code"] == code
    else:
        assert answer.json()["lines"] == []
    assert _log(site) == before
