"""Chat through the daemon: default agent, parallel conversations, memory reminders."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from shared import protocol
from shared.models.messages import Message
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.store.locks import file_lock
from tests.support.daemon import DaemonRunner
from tests.support.memory_lock import descriptors_on
from tests.support.names import model_path
from tests.support.waiting import ceiling, wait_for

NOTE = "---\ndescription: p\n---\nx"


STREAMING = frozenset({"model_call", "assistant_delta"})
"""How the reply streams (tests/daemon/test_streaming.py); these tests read the rest."""


def _events(lines: list[dict[str, Any]]) -> list[str]:
    return [line["event"] for line in lines if "event" in line and line["event"] not in STREAMING]


def test_first_chat_creates_the_default_agent_conversation_and_memory(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    result = daemon.result("chat", {"text": "我更喜欢用 tabs 缩进"})
    assert result["text"] == "（mock）我听到了：我更喜欢用 tabs 缩进"
    assert result["stop_reason"] == "end_turn"

    agent = daemon.result("agent.show")
    assert agent["name"] == "default"
    assert agent["default_conversation_id"] == result["conversation_id"]
    commits = daemon.result("memory.log")["commits"]
    assert [c["subject"] for c in commits] == ["chore: initialize local memory"]
    memory_dir = Path(daemon.result("memory.path")["path"])
    assert (memory_dir / "system" / "human.md").is_file()
    log_file = (
        agentd_home
        / "agents"
        / agent["id"]
        / "conversations"
        / result["conversation_id"]
        / "messages.jsonl"
    )
    assert [Message.parse_line(line).role for line in log_file.read_text().splitlines()] == [
        "user",
        "assistant",
    ]


def test_agents_can_be_created_listed_renamed_and_names_stay_unique(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    created = daemon.result("agent.create", {"name": "coder", "human": "- likes tea"})
    assert daemon.call("agent.create", {"name": "coder"})[-1]["error"]["code"] == "name_taken"
    renamed = daemon.result("agent.update", {"agent": "coder", "name": "reviewer"})
    assert renamed["id"] == created["id"]
    assert [a["name"] for a in daemon.result("agent.list")["agents"]] == ["reviewer"]
    answer = daemon.result("chat", {"agent": "reviewer", "text": "what do you know about me?"})
    assert answer["text"] == "This is what I remember about you:\n- likes tea"


def test_two_conversations_run_their_turns_at_the_same_time(daemon: DaemonRunner) -> None:
    calls: list[tuple[float, float]] = []
    provider = SlowProvider(calls, delay_s=0)
    daemon.start(provider=provider)
    first = daemon.result("chat", {"text": "warm up"})["conversation_id"]
    second = daemon.result("conversation.create")["id"]
    calls.clear()
    provider.together = 2  # each call now ends only once both have started (or at a ceiling)

    threads = [
        threading.Thread(target=daemon.result, args=("chat", {"text": "a", "conversation": c}))
        for c in (first, second)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(ceiling(10))

    (_, end_a), (start_b, _) = sorted(calls)
    assert start_b < end_a, "the second conversation waited for the first"


def test_a_second_request_to_one_conversation_waits_for_the_first(daemon: DaemonRunner) -> None:
    calls: list[tuple[float, float]] = []
    provider = SlowProvider(calls, delay_s=0.3)
    daemon.start(provider=provider)
    conversation = daemon.result("chat", {"text": "warm up"})["conversation_id"]
    calls.clear()
    lines: dict[str, list[dict[str, Any]]] = {}

    def chat(name: str) -> None:
        lines[name] = daemon.call("chat", {"text": name, "conversation": conversation})

    first = threading.Thread(target=chat, args=("first",))
    first.start()
    wait_for(lambda: len(provider.starts) == 2, "the first turn to reach the model")
    second = threading.Thread(target=chat, args=("second",))
    second.start()
    first.join(ceiling(10))
    second.join(ceiling(10))

    (_, end_first), (start_second, _) = sorted(calls)
    assert start_second >= end_first
    assert "waiting" in _events(lines["second"])
    assert lines["second"][-1]["result"]["stop_reason"] == "end_turn"


def test_memory_committed_elsewhere_reaches_the_next_turn_as_a_reminder(
    daemon: DaemonRunner,
) -> None:
    provider = ScriptedProvider([text_reply("one"), text_reply("two"), text_reply("three")])
    daemon.start(provider=provider)
    daemon.result("chat", {"text": "hello"})
    memory_dir = Path(daemon.result("memory.path")["path"])
    # What a reflection merge does: a commit on the memory repo's main branch.
    (memory_dir / "system" / "human.md").write_text(
        "---\nname: human\ndescription: What I know about the user.\n---\n- prefers tabs\n"
    )
    _git(memory_dir, "commit", "-qam", "reflection: remember tabs")

    lines = daemon.call("chat", {"text": "what now?"})
    third = daemon.call("chat", {"text": "and now?"})

    assert _events(lines)[0] == "memory_update"
    update = next(line["data"] for line in lines if line.get("event") == "memory_update")
    assert update["files"] == ["system/human.md"]
    second_request = provider.requests[1]
    reminder = second_request.messages[-2]
    assert (reminder.kind, reminder.role) == ("reminder", "user")
    assert "<memory_update>" in reminder.content and "system/human.md" in reminder.content
    assert "- prefers tabs" in second_request.system
    assert "memory_update" not in _events(third)


def test_the_agents_own_memory_edit_reminds_its_other_conversations_only(
    daemon: DaemonRunner,
) -> None:
    provider = ScriptedProvider()
    daemon.start(provider=provider)
    memory_dir = daemon.result("agent.create", {"name": "writer"})["memory_dir"]
    other = daemon.result("conversation.create", {"agent": "writer"})["id"]
    note = model_path(memory_dir, "notes/project.md")
    provider.enqueue(
        tool_reply(("write_file", json.dumps({"path": note, "content": NOTE}))),
        text_reply("saved"),
        text_reply("same conversation"),
        text_reply("other conversation"),
    )
    lines = daemon.call("chat", {"agent": "writer", "text": "remember x"})
    assert _events(lines) == ["tool_call", "tool_result", "assistant"]
    subjects = [c["subject"] for c in daemon.result("memory.log", {"agent": "writer"})["commits"]]
    assert subjects == ["write_file: create notes/project.md", "chore: initialize local memory"]

    same = daemon.call("chat", {"agent": "writer", "text": "next"})
    elsewhere = daemon.call("chat", {"agent": "writer", "text": "hi", "conversation": other})

    assert "memory_update" not in _events(same)
    assert _events(elsewhere)[0] == "memory_update"


def test_a_memory_edit_shows_in_the_system_prompt_of_the_same_turns_next_step(
    daemon: DaemonRunner,
) -> None:
    """The first step's prompt is compiled from the HEAD read as the turn started; every
    later step's from memory as it is then, the turn's own edits included."""
    provider = ScriptedProvider()
    daemon.start(provider=provider)
    memory_dir = daemon.result("agent.create", {"name": "writer"})["memory_dir"]
    shown = model_path(memory_dir, "system")
    human = "---\nname: human\ndescription: What I know about the user.\n---\n- prefers tabs\n"
    provider.enqueue(
        tool_reply(("write_file", json.dumps({"path": f"{shown}/human.md", "content": human}))),
        text_reply("saved"),
    )
    daemon.call("chat", {"agent": "writer", "text": "I prefer tabs"})

    before, after = provider.requests
    assert "- prefers tabs" not in before.system
    assert "- prefers tabs" in after.system


def test_a_reflection_merged_while_an_edit_waits_for_the_memory_lock_is_announced_next_turn(
    daemon: DaemonRunner,
) -> None:
    provider = ScriptedProvider()
    daemon.start(provider=provider)
    memory_dir = Path(daemon.result("agent.create", {"name": "writer"})["memory_dir"])
    note = model_path(memory_dir, "notes/project.md")
    provider.enqueue(
        tool_reply(("write_file", json.dumps({"path": note, "content": NOTE}))),
        text_reply("saved"),
        text_reply("next"),
    )
    memory_lock = memory_dir.parent / "memory.lock"
    edited: list[list[dict[str, Any]]] = []
    turn = threading.Thread(
        target=lambda: edited.append(daemon.call("chat", {"agent": "writer", "text": "note x"}))
    )
    with file_lock(memory_lock):  # the reflection worker, about to merge
        turn.start()
        wait_for(lambda: descriptors_on(memory_lock) == 2, "write_file to wait for the lock")
        (memory_dir / "system" / "human.md").write_text(
            "---\nname: human\ndescription: What I know about the user.\n---\n- prefers tabs\n"
        )
        _git(memory_dir, "commit", "-qam", "merge(reflection): remember tabs")
    turn.join(ceiling(30))

    lines = daemon.call("chat", {"agent": "writer", "text": "what now?"})

    assert _events(edited[0]) == ["tool_call", "tool_result", "assistant"]
    assert _events(lines)[0] == "memory_update"
    update = next(line["data"] for line in lines if line.get("event") == "memory_update")
    assert "system/human.md" in update["files"]
    reminder = provider.requests[-1].messages[-2]
    assert reminder.kind == "reminder" and "system/human.md" in reminder.content


def test_messages_page_through_the_whole_log_with_cursors(daemon: DaemonRunner) -> None:
    daemon.start()
    for i in range(3):
        daemon.result("chat", {"text": f"m{i}"})
    everything = daemon.result("messages.list", {"limit": 100, "order": "asc"})["messages"]
    assert [m["content"] for m in everything][::2] == ["m0", "m1", "m2"]
    middle = everything[2]["id"]

    before = daemon.result("messages.list", {"before": middle, "order": "asc"})["messages"]
    after = daemon.result("messages.list", {"after": middle, "limit": 2, "order": "asc"})
    newest = daemon.result("messages.list", {"limit": 2})["messages"]

    assert [m["id"] for m in before] == [m["id"] for m in everything[:2]]
    assert [m["id"] for m in after["messages"]] == [m["id"] for m in everything[3:5]]
    assert [m["id"] for m in newest] == [m["id"] for m in everything[:-3:-1]]  # newest first
    unknown = daemon.call("messages.list", {"before": "msg-unknown"})[-1]
    assert unknown["error"]["code"] == "unknown_message"


def test_shutdown_lets_the_turn_in_flight_finish_and_removes_the_socket(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    calls: list[tuple[float, float]] = []
    provider = SlowProvider(calls, delay_s=0.5)
    daemon.start(provider=provider)
    daemon.result("chat", {"text": "warm up"})
    results: list[dict[str, Any]] = []
    chat = threading.Thread(target=lambda: results.append(daemon.result("chat", {"text": "x"})))
    chat.start()
    wait_for(lambda: len(provider.starts) == 2, "the turn to reach the model")
    assert daemon.result("shutdown") == {"stopping": True}
    chat.join(ceiling(10))
    daemon.thread.join(ceiling(10))  # type: ignore[union-attr]
    assert results and results[0]["stop_reason"] == "end_turn"
    assert not (agentd_home / "run" / "agentd.sock").exists()


class SlowProvider(ScriptedProvider):
    """Answers every request after a delay, recording when each call started and ran.

    With ``together`` set, a call also waits until that many calls have been in flight at
    once (up to a ceiling): calls that can overlap then do, however slowly a busy machine
    schedules them, and calls that cannot are seen not to."""

    def __init__(self, calls: list[tuple[float, float]], delay_s: float) -> None:
        super().__init__()
        self.calls = calls
        self.delay = delay_s
        self.starts: list[float] = []
        self.together = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        import asyncio

        start = time.monotonic()
        self.starts.append(start)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        deadline = start + ceiling(10)
        while self.most_in_flight < self.together and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.in_flight -= 1
        self.calls.append((start, time.monotonic()))
        return text_reply("slow answer")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True)


def _last_logged(home: Path) -> dict[str, Any]:
    """The conversation's newest logged message ({} while its log is still empty)."""
    (path,) = home.glob("agents/*/conversations/*/messages.jsonl")
    lines = path.read_text().splitlines()
    return json.loads(lines[-1]) if lines else {}


def test_shutdown_cancels_a_turn_that_outlasts_the_grace_and_records_it(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    calls: list[tuple[float, float]] = []
    provider = SlowProvider(calls, delay_s=ceiling(3600))
    daemon.start(provider=provider, shutdown_grace_s=0.3)
    memory_dir_ready = daemon.result("agent.show")  # creates the agent before the turn
    assert memory_dir_ready["name"] == "default"
    replies: list[list[dict[str, Any]]] = []
    chat = threading.Thread(
        target=lambda: replies.append(daemon.call("chat", {"text": "take your time"}))
    )
    chat.start()
    wait_for(lambda: provider.starts, "the turn to reach the model")
    daemon.result("shutdown")
    daemon.thread.join(ceiling(15))  # type: ignore[union-attr]

    chat.join(ceiling(10))
    assert not chat.is_alive(), "the turn outlasted the shutdown"
    assert replies[0][-1]["error"]["code"] == "cancelled"
    last = _last_logged(agentd_home)
    assert (last["kind"], last["stop_reason"]) == ("stop", "cancelled")
    assert not (agentd_home / "run" / "agentd.sock").exists()


def test_closing_the_connection_cancels_its_turn(daemon: DaemonRunner, agentd_home: Path) -> None:
    calls: list[tuple[float, float]] = []
    provider = SlowProvider(calls, delay_s=ceiling(3600))
    daemon.start(provider=provider)
    daemon.result("agent.show")
    connection = daemon.connect()
    connection.sock.sendall(protocol.request("r1", "chat", {"text": "never mind"}))
    wait_for(lambda: provider.starts, "the turn to reach the model")
    connection.close()

    wait_for(
        lambda: _last_logged(agentd_home).get("stop_reason") == "cancelled",
        "the turn to be cancelled",
    )
    assert daemon.result("hello")["service"] == "agentd"
