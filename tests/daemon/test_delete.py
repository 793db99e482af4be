"""Deleting agents and conversations: asked for, refused while in use, moved to the trash
whole (never erased), and everything that pointed at them dropped (recall, Redis)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentd.reflection.outbox import OutboxEntry
from shared.coordination import redis_keys
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.scripted import ScriptedProvider, text_reply
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests


class HeldProvider(ScriptedProvider):
    """Answers once ``release`` is set: a turn that runs as long as the test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return text_reply("done")


@pytest.fixture
def provider() -> HeldProvider:
    held = HeldProvider()
    held.release.set()
    return held


@pytest.fixture
def ada(
    daemon: DaemonRunner, redis_server: RedisForTests, provider: HeldProvider
) -> dict[str, Any]:
    daemon.start(provider=provider)
    agent = daemon.result("agent.create", {"name": "ada"})
    daemon.result("chat", {"agent": "ada", "text": "the port is 5432"})
    return agent


def _trash(home: Path) -> list[Path]:
    return sorted(Layout(home).trash_dir.glob("*")) if Layout(home).trash_dir.is_dir() else []


def test_a_deleted_agent_is_moved_to_the_trash_whole_and_its_redis_keys_dropped(
    daemon: DaemonRunner, ada: dict[str, Any], agentd_home: Path, redis_server: RedisForTests
) -> None:
    agent_dir = Layout(agentd_home).agent_dir(ada["id"])
    # tantivy's own scratch files in the recall cache come and go as it commits and merges
    files_before = {
        p.relative_to(agent_dir) for p in agent_dir.rglob("*") if not p.name.startswith(".tmp")
    }
    request = daemon.result("reflection.request", {"agent": "ada"})["request_id"]
    client = redis_server.client
    client.set(redis_keys.job_tries(request), 1)
    sent = Layout(agentd_home).reflection_files(ada["id"]).outbox / f"{request}.json"
    ticket = OutboxEntry.model_validate_json(sent.read_text()).ticket
    assert ticket is not None and client.exists(redis_keys.job_input(ticket.input_id))
    others = {"headers": {"id": "rq-someone-else"}}
    client.rpush(redis_keys.REFLECTION_QUEUE, json.dumps(others))

    deleted = run_agentctl("agents", "delete", "ada", "--yes")

    assert deleted.returncode == 0, deleted.stderr
    [trashed] = _trash(agentd_home)
    assert trashed.name.endswith(f"-{ada['id']}")
    assert deleted.stdout == f"deleted agent ada ({ada['id']}); moved to {trashed}\n"
    assert not agent_dir.exists()
    assert {p.relative_to(trashed) for p in trashed.rglob("*")} >= files_before
    assert "5432" in next(trashed.glob("conversations/*/messages.jsonl")).read_text()
    remaining = {key.decode() for key in client.keys(f"{redis_keys.PREFIX}:*")}
    assert not [key for key in remaining if ada["id"] in key or request in key]
    assert not client.exists(
        redis_keys.job_input(ticket.input_id), redis_keys.job_input_bundle(ticket.input_id)
    )
    assert [json.loads(m) for m in client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1)] == [others]
    assert daemon.result("agent.list")["agents"] == []
    search = run_agentctl("search", "5432", "--agent", "ada")
    assert search.returncode == 1 and search.stderr.startswith("unknown_agent: ")
    again = daemon.result("agent.create", {"name": "ada"})
    assert daemon.result("recall.search", {"agent": again["id"], "query": "5432"})["hits"] == []


def test_without_a_terminal_a_delete_needs_yes(
    daemon: DaemonRunner, ada: dict[str, Any], agentd_home: Path
) -> None:
    refused = run_agentctl("agents", "delete", "ada")
    conversation = run_agentctl("conversations", "delete", ada["default_conversation_id"] or "x")

    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert conversation.returncode == 2 and "pass --yes" in conversation.stderr
    assert _trash(agentd_home) == []
    assert [a["name"] for a in daemon.result("agent.list")["agents"]] == ["ada"]


@pytest.mark.parametrize(("answer", "deleted"), [("n", False), ("y", True)])
def test_on_a_terminal_the_user_is_asked(
    daemon: DaemonRunner, ada: dict[str, Any], agentd_home: Path, answer: str, deleted: bool
) -> None:
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.client", "agents", "delete", "ada"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=terminal,
        env=dict(os.environ),
    )
    os.close(terminal)
    asked = b""
    while b"[y/N]" not in asked and proc.poll() is None:
        asked += os.read(controller, 1024)
    os.write(controller, f"{answer}\n".encode())
    proc.wait(ceiling(60))
    os.close(controller)

    assert f"Delete agent ada ({ada['id']})".encode() in asked
    assert proc.returncode == (0 if deleted else 1)
    assert len(_trash(agentd_home)) == int(deleted)


def test_a_delete_is_refused_while_a_turn_or_a_reflection_of_the_agent_runs(
    daemon: DaemonRunner,
    ada: dict[str, Any],
    agentd_home: Path,
    provider: HeldProvider,
    redis_server: RedisForTests,
) -> None:
    assert daemon.daemon is not None
    conversation = daemon.result("conversation.create", {"agent": "ada"})["id"]
    provider.release.clear()
    turn = threading.Thread(
        target=daemon.result,
        args=("chat", {"agent": "ada", "conversation": conversation, "text": "hi"}),
    )
    turn.start()
    daemon_turns = daemon.daemon.turns
    wait_for(lambda: daemon_turns.running(ada["id"]) == [conversation], "the turn to start")

    during_turn = run_agentctl("agents", "delete", "ada", "--yes")
    other_conversation = run_agentctl(
        "conversations", "delete", ada["default_conversation_id"], "--agent", "ada", "--yes"
    )
    provider.release.set()
    turn.join(ceiling(60))
    redis_server.client.set(
        redis_keys.lease(ada["id"]), f"reflector {socket.gethostname()} {os.getpid()}"
    )
    during_reflection = run_agentctl("agents", "delete", "ada", "--yes")

    assert during_turn.returncode == 1
    assert during_turn.stderr.startswith(
        f"in_use: a turn of 'ada' is running (conversation {conversation})"
    )
    assert during_reflection.returncode == 1
    assert during_reflection.stderr.startswith("in_use: a reflection of agent 'ada' is running")
    assert other_conversation.returncode == 0, other_conversation.stderr
    assert [p.name.split("-", 1)[1] for p in _trash(agentd_home)] == [
        ada["default_conversation_id"]
    ]
    assert Layout(agentd_home).agent_dir(ada["id"]).is_dir()


def test_a_deleted_conversation_leaves_the_trash_and_recall_and_the_default_starts_anew(
    daemon: DaemonRunner, ada: dict[str, Any], agentd_home: Path
) -> None:
    other = daemon.result("conversation.create", {"agent": "ada"})["id"]
    daemon.result("chat", {"agent": "ada", "conversation": other, "text": "the host is db1"})
    default = ada["default_conversation_id"]

    first = run_agentctl("conversations", "delete", other, "--agent", "ada", "--yes")
    second = run_agentctl("conversations", "delete", default, "--agent", "ada", "--yes")

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert sorted(p.name.split("-", 1)[1] for p in _trash(agentd_home)) == sorted([other, default])
    assert daemon.result("recall.search", {"agent": "ada", "query": "db1 5432"})["hits"] == []
    assert daemon.result("conversation.list", {"agent": "ada"})["conversations"] == []
    missing = run_agentctl("messages", "--agent", "ada", "--conversation", other)
    assert missing.returncode == 1 and missing.stderr.startswith("unknown_conversation: ")
    daemon.result("chat", {"agent": "ada", "text": "a fresh start"})
    [fresh] = daemon.result("conversation.list", {"agent": "ada"})["conversations"]
    assert fresh["default"] and fresh["id"] not in (other, default)
