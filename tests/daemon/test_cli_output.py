"""What agentctl prints and how it exits, as a user sees it: the real agentctl, against the
daemon in this worker (tests/daemon/conftest.py).

Times are checked in zones far from UTC on both sides (UTC+14 and UTC−10/−9) and in UTC
itself, against the daemon's own ``--json`` times, so the suite passes in any ``TZ``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from shared.home import socket_path
from shared.models.reflection import ReflectionOutcome
from shared.reflection import events
from shared.store.layout import Layout
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

ZONES = ("Pacific/Kiritimati", "America/Adak", "UTC")
LONG = "今天天气不错。" * 40
"""Three turns of this overflow a 1,200-token window once: a compaction to show."""


@pytest.fixture
def serving(daemon: DaemonRunner) -> DaemonRunner:
    """The daemon with a 1,200-token window (see :data:`LONG`)."""
    daemon.start(context_window=1200)
    return daemon


def json_of(*args: str) -> Any:
    result = run_agentctl(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def in_zone(*args: str, zone: str) -> list[str]:
    result = run_agentctl(*args, env={**os.environ, "TZ": zone})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def local(iso: str, zone: str) -> str:
    """How a person in ``zone`` should see the daemon's time ``iso``."""
    moment = datetime.fromisoformat(iso).astimezone(ZoneInfo(zone))
    shown = moment.isoformat(timespec="seconds")
    return shown.removesuffix("+00:00") + "Z" if shown.endswith("+00:00") else shown


def chat_until_a_compaction() -> None:
    for n in range(3):
        assert run_agentctl("chat", "-p", f"第 {n} 个话题：{LONG}").returncode == 0


def record_a_reflection(home: Path, clock: FakeClock) -> None:
    (agent,) = json_of("agents", "list")
    finished = clock.advance(seconds=3)
    events.append(
        Layout(home).reflections_dir(agent["id"]),
        ReflectionOutcome(
            reflection_id="r1",
            request_id="q1",
            agent_id=agent["id"],
            trigger="manual",
            status="merged",
            message="Merged 1 reflection commit(s).",
            started_at=finished - timedelta(seconds=2),
            finished_at=finished,
        ),
    )


# --- 1. a closed stdout is not a daemon failure ----------------------------------------------


def run_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """agentctl writing to a pipe nobody reads any more (``| head -1`` once it has its
    line), made certain: the read end is closed before agentctl starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "agentd.client", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=ceiling(60),
        )
    finally:
        os.close(write_end)


def test_a_reader_that_stops_reading_ends_agentctl_quietly_with_0(serving: DaemonRunner) -> None:
    run_agentctl("chat", "-p", "我们的数据库端口是 5433")
    for args in (("messages", "--limit", "100"), ("status",), ("search", "数据库端口")):
        result = run_into_a_closed_pipe(*args)
        assert (result.returncode, result.stderr) == (0, ""), args


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_daemon_that_drops_the_connection_is_still_disconnected_and_1(reset: bool) -> None:
    path = socket_path()
    path.parent.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def drop_one() -> None:
        connection, _ = server.accept()
        connection.recv(65536)
        if reset:
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        connection.close()

    dropper = threading.Thread(target=drop_one)
    dropper.start()
    try:
        result = run_into_a_closed_pipe("status")
    finally:
        dropper.join(ceiling(30))
        server.close()
    assert result.returncode == 1
    assert result.stderr.startswith("disconnected: agentd ")


# --- 3. one way to show time --------------------------------------------------------------------


def test_every_listing_shows_local_time_with_its_offset(
    serving: DaemonRunner, agentd_home: Path, clock: FakeClock
) -> None:
    chat_until_a_compaction()
    record_a_reflection(agentd_home, clock)
    messages = json_of("messages", "--limit", "100")
    hits = json_of("search", "话题")
    (conversation,) = json_of("conversations")
    (reflection,) = json_of("reflections")
    compaction = json_of("context")["last_compaction"]
    memory = Path(run_agentctl("memory", "path").stdout.strip())
    commit_date = subprocess.run(
        ["git", "-C", str(memory), "log", "-1", "--format=%aI"], capture_output=True, text=True
    ).stdout.strip()

    for zone in ZONES:
        assert [line.split()[0] for line in in_zone("messages", "--limit", "100", zone=zone)] == [
            local(m["created_at"], zone) for m in messages
        ]
        assert [line.split("\t")[1] for line in in_zone("search", "话题", zone=zone)] == [
            local(h["created_at"], zone) for h in hits
        ]
        (listed,) = in_zone("conversations", zone=zone)
        assert listed.endswith("\t" + local(conversation["created_at"], zone))
        assert in_zone("memory", "log", zone=zone)[0].split()[1] == local(commit_date, zone)
        (outcome,) = in_zone("reflections", zone=zone)
        assert outcome.split("\t")[0] == local(reflection["finished_at"], zone)
        status = "\n".join(in_zone("status", zone=zone))
        assert f"last merged at {local(reflection['finished_at'], zone)}" in status
        context = "\n".join(in_zone("context", zone=zone))
        assert f"at {local(compaction['at'], zone)}, " in context


def test_since_and_until_read_a_date_or_a_date_time_in_the_local_zone(
    serving: DaemonRunner,
) -> None:
    run_agentctl("chat", "-p", "heliotrope")
    (hit,) = json_of("search", "heliotrope", "--role", "user")
    for zone in ZONES:
        shown = local(hit["created_at"], zone)
        day = date.fromisoformat(shown[:10])
        env = {**os.environ, "TZ": zone}

        def found(*bounds: str, env: dict[str, str] = env) -> bool:
            result = run_agentctl("search", "heliotrope", "--role", "user", *bounds, env=env)
            assert result.returncode == 0, result.stderr
            return bool(result.stdout)

        local_time = shown[:19]  # as typed, without an offset: the zone's local time
        assert found("--since", local_time, "--until", local_time), zone
        assert found("--since", shown, "--until", shown), zone
        assert found("--since", day.isoformat(), "--until", day.isoformat()), zone
        assert not found("--until", (day - timedelta(days=1)).isoformat()), zone
        assert not found("--since", (day + timedelta(days=1)).isoformat()), zone


def test_every_json_time_is_iso_8601_with_an_offset(
    serving: DaemonRunner, agentd_home: Path, clock: FakeClock
) -> None:
    chat_until_a_compaction()
    record_a_reflection(agentd_home, clock)
    answers = [
        json_of("messages"),
        json_of("search", "话题"),
        json_of("conversations"),
        json_of("agents", "list"),
        json_of("agents", "show"),
        json_of("reflections"),
        json_of("context"),
        json_of("status"),
    ]
    times = [value for answer in answers for value in _times(answer)]
    assert len(times) > 20
    for value in times:
        assert isinstance(value, str), value
        assert datetime.fromisoformat(value).utcoffset() is not None, value


def _times(value: Any) -> Iterator[Any]:
    """Every value under a key that names a time (``*_at``, ``at``, ``*_until``, ``date``)."""
    if isinstance(value, list):
        for item in value:
            yield from _times(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("at", "date") or key.endswith(("_at", "_until")):
                if item is not None:
                    yield item
            else:
                yield from _times(item)


# --- 4. order, cursors, short ids ---------------------------------------------------------------


def test_desc_lists_newest_first_and_a_cursor_starts_the_page(serving: DaemonRunner) -> None:
    for text in ("m0", "m1", "m2"):
        run_agentctl("chat", "-p", text)
    oldest_first = json_of("messages", "--order", "asc")
    ids = [m["id"] for m in oldest_first]

    def listed(*args: str) -> list[str]:
        return [line.split()[1] for line in run_agentctl("messages", *args).stdout.splitlines()]

    short = [message_id[-8:] for message_id in ids]
    assert listed() == short[::-1]
    assert listed("--order", "asc", "--limit", "2") == short[:2]
    assert listed("--after", short[0], "--limit", "2") == [short[2], short[1]]
    assert listed("--after", ids[0], "--limit", "2", "--order", "asc") == short[1:3]
    assert listed("--before", short[5], "--limit", "2") == [short[4], short[3]]


def test_search_names_each_hit_by_a_short_id_that_messages_around_takes(
    serving: DaemonRunner,
) -> None:
    run_agentctl("chat", "-p", "我们的数据库端口是 5433，别用默认的 5432")
    run_agentctl("chat", "-p", "hello")
    (row,) = [line.split("\t") for line in run_agentctl("search", "5433").stdout.splitlines()[:1]]
    (hit,) = json_of("search", "5433", "--role", "user")
    assert row[2] == hit["message_id"][-8:]

    around = run_agentctl("messages", "--around", row[2], "--before", "0", "--after", "1")
    assert around.returncode == 0, around.stderr
    lines = around.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["user", "assistant"]
    assert "◀ 我们的数据库端口是 5433" in lines[0]

    nothing = run_agentctl("search", "heliotrope")
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (0, "", "no matches\n")


# --- 11. back to the default model ---------------------------------------------------------------


def test_an_agent_updated_to_the_default_model_follows_agentd_model(
    serving: DaemonRunner, agentd_home: Path
) -> None:
    run_agentctl("agents", "create", "ada", "--model", "openai/gpt-4o-mini")
    assert "model          openai/gpt-4o-mini\n" in run_agentctl("agents", "show", "ada").stdout

    update = run_agentctl("agents", "update", "ada", "--model", "default")
    assert update.returncode == 0, update.stderr
    shown = run_agentctl("agents", "show", "ada").stdout
    assert "model          mock (the default, AGENTD_MODEL)\n" in shown
    (record,) = [json.loads(path.read_text()) for path in agentd_home.glob("agents/*/agent.json")]
    assert record["model"] is None
