"""The web view's parts on their own: the address and the Host headers it answers, login
tokens and sessions, Markdown blocks and their lines, the outcome chart's days, and how
``agentd up --web`` and ``agentctl web`` turn it on and open it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from agentd import cli
from agentd.client import main as agentctl
from agentd.stack.supervisor import Stack
from agentd.stack.up_web import check_address
from agentd.web.address import WebAddress
from agentd.web.charts import CHART_DAYS, outcomes_per_day
from agentd.web.markdown import render_blocks
from agentd.web.sessions import LOGIN_TOKEN_TTL_S, SESSION_TTL_S, Sessions
from shared.errors import WebAddressError
from shared.models.reflection import ReflectionOutcome
from shared.providers import credentials
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.web.site import WebClient


@pytest.mark.parametrize(
    ("text", "host", "port", "loopback"),
    [
        ("127.0.0.1:8765", "127.0.0.1", 8765, True),
        ("localhost:80", "localhost", 80, True),
        ("[::1]:8765", "::1", 8765, True),
        ("0.0.0.0:8765", "0.0.0.0", 8765, False),
        ("192.168.1.5:9000", "192.168.1.5", 9000, False),
    ],
)
def test_a_web_address_is_host_and_port(text: str, host: str, port: int, loopback: bool) -> None:
    address = WebAddress.parse(text)
    assert (address.host, address.port, address.loopback) == (host, port, loopback)


@pytest.mark.parametrize("text", ["8765", "127.0.0.1", "[::1]", "[nope]:80", "h:99999", "a b:1"])
def test_a_web_address_that_is_not_host_and_port_is_refused(text: str) -> None:
    with pytest.raises(WebAddressError, match=r"host:port|IPv6|port"):
        WebAddress.parse(text)


def test_only_this_servers_names_are_accepted_as_host() -> None:
    loopback = WebAddress.parse("127.0.0.1:0")
    assert loopback.accepts_host("127.0.0.1:8765", 8765)
    assert loopback.accepts_host("localhost:8765", 8765)
    assert loopback.accepts_host("[::1]:8765", 8765)
    assert not loopback.accepts_host("rebound.example:8765", 8765)  # DNS rebinding
    assert not loopback.accepts_host("127.0.0.1:8766", 8765)
    assert not loopback.accepts_host(None, 8765)
    everywhere = WebAddress.parse("0.0.0.0:8765")
    assert everywhere.accepts_host("192.168.1.5:8765", 8765)
    assert not everywhere.accepts_host("rebound.example:8765", 8765)
    named = WebAddress.parse("box.lan:8765")
    assert named.accepts_host("box.lan:8765", 8765)
    assert not named.accepts_host("127.0.0.1:8765", 8765)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_login_token_expires_and_a_session_ends() -> None:
    clock = _Clock()
    sessions = Sessions(clock)
    late = sessions.issue_login_token()
    on_time = sessions.issue_login_token()
    session = sessions.redeem(on_time)
    assert session is not None and sessions.find(session.id) == session

    clock.now += LOGIN_TOKEN_TTL_S + 1
    assert sessions.redeem(late) is None
    clock.now += SESSION_TTL_S
    assert sessions.find(session.id) is None
    assert not session.csrf_matches(None) and session.csrf_matches(session.csrf)


def test_markdown_blocks_know_their_lines_and_show_html_as_text() -> None:
    text = "---\nname: x\n---\n# Title\n\nOne <b>bold</b>\nparagraph.\n\n- a\n- b\n"
    blocks = render_blocks(text)

    assert [(b.start, b.end, b.frontmatter) for b in blocks] == [
        (0, 3, True),
        (3, 4, False),
        (5, 7, False),
        (8, 10, False),
    ]
    assert blocks[2].html == "<p>One &lt;b&gt;bold&lt;/b&gt;\nparagraph.</p>\n"


def test_outcomes_are_counted_on_the_users_days() -> None:
    zone = timezone(timedelta(hours=14))
    evening = datetime(2027, 1, 1, 9, 30, tzinfo=UTC)  # 23:30 on Jan 1st at +14:00

    def outcome(at: datetime, status: str) -> ReflectionOutcome:
        return ReflectionOutcome(
            reflection_id="r",
            request_id="q",
            agent_id="a",
            trigger="manual",
            status=status,  # type: ignore[arg-type]
            started_at=at,
            finished_at=at,
        )

    chart = outcomes_per_day(
        [
            outcome(evening, "merged"),
            outcome(evening + timedelta(hours=1), "failed"),
            outcome(evening + timedelta(hours=1), "merged"),
        ],
        zone,
    )

    assert len(chart.bars) == CHART_DAYS and chart.most == 2
    *_, jan1, jan2 = chart.bars
    assert (str(jan1.day), jan1.total, [s.status for s in jan1.segments]) == (
        "2027-01-01",
        1,
        ["merged"],
    )
    statuses = [s.status for s in jan2.segments]
    assert (str(jan2.day), statuses) == ("2027-01-02", ["merged", "failed"])


def test_up_with_web_has_its_daemon_serve_the_view_on_loopback_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[Settings] = []
    monkeypatch.setattr(cli, "_up", lambda settings: started.append(settings) or 0)
    # cli.main runs in this worker, which must not execute itself again: a key-shaped
    # variable (litellm sets TIKTOKEN_CACHE_DIR once another test imported it) would.
    monkeypatch.setattr(credentials, "without_keys_in_the_environment", lambda: None)

    assert cli.main(["up"]) == 0
    assert cli.main(["up", "--web"]) == 0
    assert cli.main(["up", "--web", "[::1]:9000"]) == 0
    assert Stack(started[1]).child_env()["AGENTD_WEB"] == "127.0.0.1:8765"
    assert "AGENTD_WEB" not in Stack(started[0]).child_env()
    monkeypatch.setenv("AGENTD_WEB", "127.0.0.1:9001")
    assert cli.main(["up", "--web"]) == 0
    assert cli.main(["up", "--web", "no-port"]) == 2
    assert [s.web for s in started] == [None, "127.0.0.1:8765", "[::1]:9000", "127.0.0.1:9001"]


def test_up_checks_the_web_address_and_warns_when_other_machines_can_reach_it(
    agentd_home: Path,
) -> None:
    said: list[tuple[str, str, str]] = []

    def say(event: str, text: str, level: str) -> None:
        said.append((event, text, level))

    assert check_address(Settings(home=agentd_home, web="127.0.0.1:8765"), say) is None
    assert said == []  # the URL itself waits for the daemon (test_web_rough_edges.py)

    assert check_address(Settings(home=agentd_home, web="0.0.0.0:8765"), say) is None
    assert [(e, level) for e, _, level in said] == [("web_view_not_loopback", "warning")]
    assert "reachable from other machines" in said[0][1]

    wrong = check_address(Settings(home=agentd_home, web="box:99999"), say)
    assert wrong is not None and "over 65535" in wrong


def test_agentctl_web_prints_a_login_link_that_works_once(
    daemon: DaemonRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.start(web="127.0.0.1:0")
    port = daemon.daemon.web.port  # type: ignore[union-attr]

    assert agentctl(["web"]) == 0
    printed = capsys.readouterr()
    url = printed.out.splitlines()[-1]  # the in-process daemon logs to stdout too
    assert url.startswith(f"http://127.0.0.1:{port}/login?token=")
    assert "logs in once" in printed.err
    assert WebClient(port).login(url).status == 303
    assert WebClient(port).login(url).status == 403
