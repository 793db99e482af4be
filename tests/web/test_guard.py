"""The web view's guard over real HTTP to a real daemon: what it refuses (no cookie, another
Host, no CSRF token, a used login token, paths and ids the socket would refuse too), that
memory is shown as text, and a chat turn streamed as server-sent events."""

from __future__ import annotations

import json

import pytest

from shared.providers.scripted import text_reply
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.web.site import Site, serve_site


@pytest.fixture
def site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    return serve_site(daemon, clock)


def _sneaky(site: Site) -> int:
    return sum(m["content"] == "sneaky" for m in site.messages())


def test_without_the_session_cookie_pages_and_chat_are_refused(site: Site) -> None:
    stranger = site.client()

    assert stranger.get("/").status == 401
    assert stranger.get(f"/agents/{site.agent_id}/memory?path=system/human.md").status == 401
    assert stranger.chat(site.chat_path, "sneaky", csrf="anything").status == 401
    assert _sneaky(site) == 0


def test_a_request_naming_another_host_is_refused_even_with_a_valid_session(site: Site) -> None:
    client = site.logged_in()
    for host in (f"rebound.example:{site.port}", f"127.0.0.1:{site.port + 1}", "127.0.0.1"):
        client.host = host
        assert client.get("/").status == 421, host
        assert client.chat(site.chat_path, "sneaky").status == 421, host
    client.host = f"localhost:{site.port}"
    assert client.get("/").status == 200
    assert _sneaky(site) == 0

    url = site.login_url()
    assert site.client(host=f"rebound.example:{site.port}").login(url).status == 421
    assert site.client().login(url).status == 303, "a refused request does not spend the token"


def test_a_chat_needs_the_sessions_csrf_token(site: Site) -> None:
    client = site.logged_in()
    other = site.logged_in()
    assert client.csrf and other.csrf and client.csrf != other.csrf

    assert client.chat(site.chat_path, "sneaky", csrf="").status == 403
    assert client.chat(site.chat_path, "sneaky", csrf="not-the-token").status == 403
    assert client.chat(site.chat_path, "sneaky", csrf=other.csrf).status == 403
    assert _sneaky(site) == 0

    site.provider.enqueue(text_reply("fine"))
    assert client.chat(site.chat_path, "sneaky").status == 200
    assert _sneaky(site) == 1


def test_a_login_token_opens_one_session_once(site: Site) -> None:
    url = site.login_url()
    first = site.client().login(url)

    assert first.status == 303 and first.headers["Location"] == "/"
    cookie = first.headers["Set-Cookie"]
    assert cookie.startswith(f"agentd_session_{site.port}=")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= attributes
    again = site.client().login(url)
    assert again.status == 403 and "Set-Cookie" not in again.headers
    assert site.client().login(url.replace("token=", "token=x")).status == 403


def test_memory_holding_a_script_is_shown_as_text(site: Site) -> None:
    page = site.logged_in().get(f"/agents/{site.agent_id}/memory?path=notes/unsafe.md")

    assert page.status == 200
    assert "<script>document.title" not in page.body
    assert "&lt;script&gt;document.title=" in page.body
    assert 'href="javascript:' not in page.body
    assert "[click](javascript:alert(1))" in page.body
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/agents/{agent}/memory?path=../agent.json", 400, "memory_path"),
        ("/agents/{agent}/memory?path=.git/config", 400, "memory_path"),
        ("/agents/{agent}/memory?path=/etc/passwd", 400, "memory_path"),
        ("/agents/{agent}/memory?path=notes/absent.md", 400, "memory_path"),
        ("/agents/a.b/memory?path=system/human.md", 400, "invalid_id"),
        ("/agents/nobody", 404, "unknown_agent"),
        ("/agents/{agent}/conversations/..%2F..%2Fagents", 400, "invalid_id"),
        ("/agents/{agent}/conversations/{conversation}?at=..%2Fx", 400, "invalid_id"),
        ("/agents/{agent}/messages/msg-nosuch", 404, "unknown_message"),
        ("/agents/{agent}/search?q=pnpm&conversation=..%2Fx", 400, "invalid_id"),
    ],
)
def test_paths_and_ids_are_refused_as_on_the_socket(
    site: Site, path: str, status: int, code: str
) -> None:
    url = path.format(agent=site.agent_id, conversation=site.conversation_id)
    answer = site.logged_in().get(url)

    assert answer.status == status
    assert code in answer.body
    assert '"name": "ada"' not in answer.body and "[core]" not in answer.body


def test_a_chat_streams_the_turns_events_then_its_result(site: Site) -> None:
    site.provider.enqueue(text_reply("Streamed."))
    answer = site.logged_in().chat(site.chat_path, "Stream it, please.")

    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    events = [
        (block.split("\n")[0].removeprefix("event: "), json.loads(block.split("data: ", 1)[1]))
        for block in answer.body.strip().split("\n\n")
    ]
    names = [name for name, _ in events]
    assert names[-2:] == ["assistant", "result"]
    assert events[-2][1] == {"text": "Streamed."}
    assert events[-1][1]["stop_reason"] == "end_turn"
    assert site.messages()[0]["content"] == "Streamed."


def test_web_login_on_a_daemon_without_the_view_says_how_to_turn_it_on(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    (answer,) = daemon.call("web.login")

    assert answer["error"]["code"] == "web_off"
    assert "agentd up --web" in answer["error"]["message"]
