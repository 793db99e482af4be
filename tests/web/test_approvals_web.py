"""The web view's Approve and Deny over real HTTP to a real daemon: the page shows what
waits, an answer needs the session and its CSRF token as a chat does, answers only for
its own conversation, and streams the turn it carries on."""

from __future__ import annotations

import json

import pytest

from shared.providers.scripted import text_reply, tool_reply
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.web.site import Response, Site, WebClient, serve_site

QUERY = json.dumps({"query": "pnpm"})


@pytest.fixture
def site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    served = serve_site(daemon, clock)
    daemon.result("agent.update", {"agent": "ada", "requires_approval": ["recall_search"]})
    return served


def _waiting(site: Site) -> str:
    """A turn of the site's conversation stopped on a gated call; its approval id."""
    site.provider.enqueue(tool_reply(("recall_search", QUERY)))
    chat = {"agent": "ada", "conversation": site.conversation_id, "text": "what about pnpm?"}
    result = site.daemon.result("chat", chat)
    assert result["stop_reason"] == "requires_approval"
    (call,) = result["approvals"]
    return call["id"]


def _answer_path(site: Site, approval: str, answer: str, conversation: str | None = None) -> str:
    where = conversation or site.conversation_id
    return f"/agents/{site.agent_id}/conversations/{where}/approvals/{approval}/{answer}"


def _post(client: WebClient, path: str, body: dict[str, str], csrf: str | None) -> Response:
    headers = {"Content-Type": "application/json"}
    if csrf:
        headers["X-CSRF-Token"] = csrf
    return client.request("POST", path, json.dumps(body).encode(), headers)


def test_the_conversation_page_shows_the_waiting_call_with_approve_and_deny(site: Site) -> None:
    approval = _waiting(site)
    client = site.logged_in()

    page = client.get(f"/agents/{site.agent_id}/conversations/{site.conversation_id}").body

    assert f'data-approval="{approval}"' in page
    assert "⚙ recall_search({&#34;query&#34;: &#34;pnpm&#34;})" in page
    assert 'value="approve">Approve</button>' in page and 'value="deny">Deny</button>' in page
    agent_page = client.get(f"/agents/{site.agent_id}").body
    row = next(line for line in agent_page.splitlines() if site.conversation_id in line)
    assert "approval waiting" in row


def test_an_answer_needs_the_session_and_its_csrf_token_and_changes_nothing_without(
    site: Site,
) -> None:
    approval = _waiting(site)
    asked = len(site.provider.requests)
    client, other = site.logged_in(), site.logged_in()
    path = _answer_path(site, approval, "approve")

    assert _post(site.client(), path, {}, csrf="anything").status == 401
    assert _post(client, path, {}, csrf=None).status == 403
    assert _post(client, path, {}, csrf=other.csrf).status == 403
    assert [a["id"] for a in site.daemon.result("approval.list")["approvals"]] == [approval]
    assert len(site.provider.requests) == asked, "no answer carried the turn on"

    site.provider.enqueue(text_reply("Found it."))
    answered = _post(client, path, {}, csrf=client.csrf)

    assert answered.status == 200
    events = [block.split("\n") for block in answered.body.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    assert names == ["tool_call", "tool_result", "model_call", "assistant", "result"]
    result = json.loads(events[-1][1].removeprefix("data: "))
    assert (result["answered"]["state"], result["turn"]["stop_reason"]) == ("approved", "end_turn")
    assert site.daemon.result("approval.list")["approvals"] == []
    again = _post(client, path, {}, csrf=client.csrf)
    assert '"code": "already_answered"' in again.body


def test_a_denial_carries_its_reason_and_a_page_answers_only_for_its_own_conversation(
    site: Site,
) -> None:
    approval = _waiting(site)
    client = site.logged_in()
    elsewhere = site.daemon.result("conversation.create", {"agent": "ada"})["id"]

    wrong = _post(client, _answer_path(site, approval, "deny", elsewhere), {}, client.csrf)
    assert '"code": "unknown_approval"' in wrong.body
    assert len(site.daemon.result("approval.list")["approvals"]) == 1

    site.provider.enqueue(text_reply("I will not search."))
    denied = _post(client, _answer_path(site, approval, "deny"), {"reason": "not now"}, client.csrf)

    assert denied.status == 200 and '"state": "denied"' in denied.body
    told = [m for m in site.provider.requests[-1].messages if m.role == "tool"][-1]
    assert told.content == "the user denied this call: not now"
