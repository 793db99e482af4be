"""A held reflection as the user meets it: told once in chat, named by ``status`` and the web
view, listed with its diff by ``agentctl memory proposals``, and answered once.

The daemon runs for real (socket, Valkey, the outcome stream); the request goes through its
outbox; the job it asked for runs in this process through the real pipeline with the
hostile sub-agent of :mod:`tests.security.hostile` (real bubblewrap, real git), and
publishes its outcome where a worker would.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from shared import sandbox
from shared.memory import git
from shared.models.reflection import ReflectionOutcome
from shared.providers.scripted import ScriptedProvider, text_reply
from shared.reflection import events
from shared.reflection.state import load_state
from shared.store.layout import Layout
from shared.store.locks import file_lock
from tests.security.hostile import FORGET, attacker
from tests.support.daemon import DaemonRunner
from tests.support.memory_lock import descriptors_on
from tests.support.processes import run_agentctl
from tests.support.reflection import work_sent_job
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests
from tests.web.site import WebClient

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)

HUMAN = "- Name: Ada Lovelace.\n- Prefers tabs."


class Held:
    """A daemon whose agent ``ada`` has one reflection held for the user."""

    def __init__(self, daemon: DaemonRunner, redis_server: RedisForTests, home: Path) -> None:
        self.daemon = daemon
        self.home = home
        self.provider = ScriptedProvider()
        daemon.start(provider=self.provider, web="127.0.0.1:0")
        self.agent = daemon.result("agent.create", {"name": "ada", "human": HUMAN})
        self.memory = Path(self.agent["memory_dir"])
        self.chat("以后一律用 tabs 缩进")
        self.before = self.head()
        self.outcome = self._reflect(redis_server)
        self.id = self.outcome.reflection_id

    @property
    def agent_id(self) -> str:
        return str(self.agent["id"])

    def chat(self, text: str) -> list[dict[str, Any]]:
        self.provider.enqueue(text_reply("好的"))
        return self.daemon.call("chat", {"agent": "ada", "text": text})

    def head(self) -> str:
        return git.run(self.memory, "rev-parse", "HEAD").stdout.strip()

    def watermark(self) -> str | None:
        conversation = self.agent["default_conversation_id"]
        return load_state(Layout(self.home).conversation_dir(self.agent_id, conversation)).watermark

    def _reflect(self, redis_server: RedisForTests) -> ReflectionOutcome:
        """Ask the daemon for a reflection and run the job it sent, as a worker would."""
        requested = self.daemon.result("reflection.request", {"agent": "ada"})
        assert requested["queued"]
        files = Layout(self.home).reflection_files(self.agent_id)
        work_sent_job(
            self.home, self.agent_id, requested["request_id"], attacker(FORGET), redis_server.client
        )
        wait_for(lambda: not list(files.outbox.glob("*.json")), "the daemon to settle the answer")
        return events.read(files.directory)[-1]


@pytest.fixture
def held(daemon: DaemonRunner, redis_server: RedisForTests, agentd_home: Path) -> Held:
    return Held(daemon, redis_server, agentd_home)


def _reflection_events(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line["data"] for line in lines if line.get("event") == "reflection"]


@pytest.mark.slow
def test_the_user_is_told_once_and_the_proposal_is_listed_with_its_diff(held: Held) -> None:
    assert held.outcome.status == "held"
    assert held.head() == held.before
    first = _reflection_events(held.chat("你还记得我吗？"))
    second = _reflection_events(held.chat("还在吗？"))

    assert [event["status"] for event in first] == ["held"]
    assert first[0]["line"].startswith(f"☾ reflection {held.id}: held — Held for you, not merged")
    assert "`agentctl memory proposals --agent ada`" in first[0]["line"]
    assert second == []

    status = run_agentctl("status")
    assert status.returncode == 0, status.stderr
    (line,) = [line for line in status.stdout.splitlines() if "held for you" in line]
    assert line.strip().startswith(
        f"! reflection {held.id} is held for you: it deletes system/human.md and "
        "system/persona.md; removes 11 of memory's 11 lines (net)"
    )
    assert line.endswith("; review it with `agentctl memory proposals --agent ada`")
    (agent,) = json.loads(run_agentctl("status", "--json").stdout)["agents"]
    assert [(p["id"], p["reason"]) for p in agent["held_proposals"]] == [
        (held.id, "system_file_deleted")
    ]

    listed = run_agentctl("memory", "proposals", "--agent", "ada")
    assert listed.returncode == 0, listed.stderr
    assert f"proposal {held.id}  held " in listed.stdout
    assert "held because it deletes system/human.md and system/persona.md" in listed.stdout
    assert f"accept: agentctl memory accept {held.id} --agent ada" in listed.stdout
    assert "deleted file mode 100644" in listed.stdout
    assert "-- Name: Ada Lovelace." in listed.stdout
    as_json = json.loads(run_agentctl("memory", "proposals", "--json", "-a", "ada").stdout)
    assert [p["id"] for p in as_json] == [held.id]

    web = held.daemon.daemon.web  # type: ignore[union-attr]
    client = WebClient(web.port)
    assert client.login(held.daemon.result("web.login")["url"]).status == 303
    page = client.get(f"/agents/{held.agent_id}")
    assert page.status == 200
    assert "Held for you" in page.body and f'id="proposal-{held.id}"' in page.body
    assert "-- Name: Ada Lovelace." in page.body


@pytest.mark.slow
def test_accept_merges_it_once_and_the_next_turn_is_told_memory_changed(held: Held) -> None:
    moved = held.watermark()
    assert moved is not None

    accepted = run_agentctl("memory", "accept", held.id, "--agent", "ada")
    again = run_agentctl("memory", "accept", held.id, "--agent", "ada")
    rejected = run_agentctl("memory", "reject", held.id, "--agent", "ada")

    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.startswith(f"accepted proposal {held.id}: merged in ")
    assert not (held.memory / "system" / "human.md").exists()
    assert not (held.memory / "system" / "persona.md").exists()
    assert again.returncode == 1 and again.stderr.startswith("proposal_answered: ")
    assert rejected.returncode == 1 and rejected.stderr.startswith("proposal_answered: ")
    assert held.watermark() == moved
    lines = held.chat("现在呢？")
    assert any(line.get("event") == "memory_update" for line in lines)
    assert "held for you" not in run_agentctl("status").stdout
    nothing = run_agentctl("memory", "proposals", "--agent", "ada")
    assert nothing.stdout == "" and "no reflection is held for you" in nothing.stderr


@pytest.mark.slow
def test_reject_drops_it_once_and_memory_stays(held: Held) -> None:
    moved = held.watermark()

    rejected = run_agentctl("memory", "reject", held.id, "--agent", "ada")
    again = held.daemon.call("memory.reject", {"agent": "ada", "proposal": held.id})[-1]
    unknown = held.daemon.call("memory.accept", {"agent": "ada", "proposal": "20990101-x"})[-1]
    path_like = held.daemon.call("memory.accept", {"agent": "ada", "proposal": "../x"})[-1]

    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout == f"rejected proposal {held.id}: memory is unchanged\n"
    assert again["error"]["code"] == "proposal_answered"
    assert unknown["error"]["code"] == "unknown_proposal"
    assert path_like["error"]["code"] == "invalid_id"
    assert held.head() == held.before
    assert (held.memory / "system" / "human.md").read_text().endswith(HUMAN + "\n")
    assert git.run(held.memory, "for-each-ref", "refs/proposals/").stdout == ""
    assert held.watermark() == moved


def test_two_clients_accepting_at_once_merge_it_once(held: Held) -> None:
    lock = held.memory.parent / "memory.lock"
    answers: list[dict[str, Any]] = []

    def answer() -> None:
        call = held.daemon.call("memory.accept", {"agent": "ada", "proposal": held.id})
        answers.append(call[-1])

    clients = [threading.Thread(target=answer) for _ in range(2)]
    with file_lock(lock):  # both answers queue at the memory lock, then race for it
        for client in clients:
            client.start()
        wait_for(lambda: descriptors_on(lock) == 3, "both accepts to wait for the memory lock")
    for client in clients:
        client.join(ceiling(60))

    assert sorted("error" in a for a in answers) == [False, True]
    (refused,) = [a["error"] for a in answers if "error" in a]
    assert refused["code"] == "proposal_answered"
    merges = git.run(held.memory, "log", "--format=%s", f"{held.before}..HEAD").stdout
    assert merges.count(f"accept held proposal {held.id}") == 1
