"""``remember`` and ``forget`` through the daemon and the real agentctl: a note lands as one
``- `` line in one commit that ``memory why`` explains; forgetting lists the lines, then
removes exactly those in one commit that ``memory revert`` undoes byte for byte; both
wait for the memory lock, keep to memory's size limits, never sweep uncommitted edits
into their commit, and change nothing when refused."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ClientError
from shared.store.layout import memory_lock
from shared.store.locks import file_lock
from tests.support.daemon import DaemonRunner
from tests.support.memory_lock import descriptors_on
from tests.support.processes import run_agentctl
from tests.support.terminal import Terminal
from tests.support.waiting import ceiling, wait_for

HUMAN = "system/human.md"


@pytest.fixture
def agent(daemon: DaemonRunner) -> dict[str, Any]:
    daemon.start()
    daemon.result("chat", {"text": "hello"})
    return daemon.result("agent.show", {})


def _log(daemon: DaemonRunner) -> list[dict[str, Any]]:
    return daemon.result("memory.log", {})["commits"]


def _human(daemon: DaemonRunner) -> str:
    return str(daemon.result("memory.show", {"path": HUMAN})["text"])


def _refused(daemon: DaemonRunner, op: str, params: dict[str, Any]) -> ClientError:
    with pytest.raises(ClientError) as refused:
        daemon.result(op, params)
    return refused.value


def _files(agent: dict[str, Any]) -> dict[str, bytes]:
    """Every file of the memory checkout, byte for byte (``.git`` aside)."""
    root = Path(agent["memory_dir"])
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


def test_a_note_lands_as_one_line_in_one_commit_that_why_explains_and_the_agent_is_told(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    before = _human(daemon)

    done = run_agentctl("remember", "I take my coffee black")

    [newest, *_] = _log(daemon)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"remembered in {HUMAN} ({newest['short_sha']}): - I take my coffee black\n"
    )
    assert _human(daemon) == before + "- I take my coffee black\n"
    assert (newest["author"], newest["subject"]) == ("user", "remember: I take my coffee black")
    [match] = daemon.result("memory.why", {"text": "coffee"})["matches"]
    assert match["commit"]["provenance"] == {
        **match["commit"]["provenance"],
        "kind": "user",
        "via": "agentctl",
        "client": None,
    }
    why = run_agentctl("memory", "why", "coffee").stdout.splitlines()
    assert f"{newest['short_sha']}" in why[1] and "via agentctl" in why[1]
    assert why[2] == "  remembered by the user with agentctl remember"
    lines = daemon.call("chat", {"text": "what do you know about me?"})
    [update] = [line["data"] for line in lines if line.get("event") == "memory_update"]
    assert update["files"] == [HUMAN]
    assert "- I take my coffee black" in lines[-1]["result"]["text"]


def test_a_note_held_already_commits_nothing(daemon: DaemonRunner, agent: dict[str, Any]) -> None:
    daemon.result("memory.remember", {"text": "likes tea"})
    before = _log(daemon)

    again = run_agentctl("remember", "  likes\ntea ")

    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{HUMAN} holds this line already; nothing was committed: - likes tea\n"
    assert _log(daemon) == before
    assert _human(daemon).count("- likes tea") == 1


def test_a_note_may_go_to_another_file_and_a_new_one_gets_frontmatter(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    done = daemon.result("memory.remember", {"text": "ships in May", "path": "notes/project.md"})

    assert done["path"] == "notes/project.md" and done["commit"] is not None
    text = daemon.result("memory.show", {"path": "notes/project.md"})["text"]
    assert text == "---\nname: project\ndescription: ''\n---\n- ships in May\n"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"text": "x", "path": "../outside.md"}, "memory_path"),
        ({"text": "x", "path": ".git/config.md"}, "memory_path"),
        ({"text": "x", "path": "notes.txt"}, "memory_path"),
        ({"text": "\n\t\x07 "}, "malformed_request"),
        ({"text": ""}, "malformed_request"),
        ({"text": "x" * 2_001}, "malformed_request"),
        ({"text": "x", "via": "mcp", "client": "a"}, None),
        ({"text": "x", "client": "claude"}, "malformed_request"),
        ({"text": "x", "via": "telnet"}, "malformed_request"),
        ({"text": "x", "agent": "../etc"}, "invalid_id"),
        ({"text": "x", "agent": "nobody"}, "unknown_agent"),
    ],
)
def test_a_bad_note_is_refused_and_changes_nothing(
    daemon: DaemonRunner, agent: dict[str, Any], params: dict[str, Any], code: str | None
) -> None:
    before, files = _log(daemon), _files(agent)
    if code is None:  # the one good request among them: the others fail for their fault
        assert daemon.result("memory.remember", params)["commit"] is not None
        return

    assert _refused(daemon, "memory.remember", params).code == code
    assert _log(daemon) == before and _files(agent) == files


def test_a_note_that_would_break_a_size_limit_is_refused_and_changes_nothing(
    daemon: DaemonRunner,
) -> None:
    daemon.start(memory_file_max_bytes=200, memory_max_bytes=10_000)
    daemon.result("chat", {"text": "hello"})
    before = _log(daemon)

    refused = _refused(daemon, "memory.remember", {"text": "y" * 150})

    assert refused.code == "memory_too_large"
    assert "over the 200-byte limit for one memory file" in refused.message
    assert "Nothing was written" in refused.message
    assert _log(daemon) == before and "y" * 150 not in _human(daemon)


def test_a_note_that_would_grow_memory_past_its_limit_is_refused(daemon: DaemonRunner) -> None:
    daemon.start(memory_max_bytes=600)
    daemon.result("chat", {"text": "hello"})
    before = _log(daemon)

    refused = _refused(daemon, "memory.remember", {"text": "z" * 500})

    assert (refused.code, "AGENTD_MEMORY_MAX_BYTES" in refused.message) == (
        "memory_too_large",
        True,
    )
    assert _log(daemon) == before


def test_uncommitted_edits_are_never_swept_into_a_note_or_a_forget(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "likes tea"})
    draft = Path(agent["memory_dir"], "notes", "draft.md")
    draft.parent.mkdir()
    draft.write_text("half done\n")
    before = _log(daemon)
    listed = daemon.result("memory.forget", {"pattern": "tea"})

    remembered = _refused(daemon, "memory.remember", {"text": "likes coffee"})
    forgot = _refused(
        daemon, "memory.forget", {"pattern": "tea", "confirm": True, "base": listed["head"]}
    )

    for refused in (remembered, forgot):
        assert refused.code == "memory_conflict"
        assert "notes/draft.md" in refused.message and "agentctl memory commit" in refused.message
    assert _log(daemon) == before and draft.read_text() == "half done\n"
    assert "likes tea" in _human(daemon)


def test_forget_lists_then_removes_exactly_those_lines_in_one_commit_that_revert_undoes(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "Coffee: black"})
    daemon.result("memory.remember", {"text": "tea in the afternoon"})
    daemon.result("memory.remember", {"text": "coffee beans from Kenya", "path": "notes/shop.md"})
    files, before = _files(agent), _log(daemon)

    listed = daemon.result("memory.forget", {"pattern": "COFFEE"})

    assert [(line["path"], line["text"]) for line in listed["lines"]] == [
        ("notes/shop.md", "- coffee beans from Kenya"),
        (HUMAN, "- Coffee: black"),
    ]
    assert listed["head"] == before[0]["sha"] and _log(daemon) == before
    done = daemon.result(
        "memory.forget", {"pattern": "COFFEE", "confirm": True, "base": listed["head"]}
    )
    [forget, *rest] = _log(daemon)
    assert rest == before
    assert done["commit"] == forget["sha"] and done["lines"] == listed["lines"]
    assert forget["subject"] == 'forget: 2 lines containing "COFFEE"'
    assert "- tea in the afternoon" in _human(daemon) and "offee" not in _human(daemon)
    assert "name: shop" in daemon.result("memory.show", {"path": "notes/shop.md"})["text"]

    reverted = run_agentctl("memory", "revert", forget["short_sha"])

    assert reverted.returncode == 0, reverted.stderr
    assert _files(agent) == files


def test_forget_never_matches_frontmatter(daemon: DaemonRunner, agent: dict[str, Any]) -> None:
    listed = daemon.result("memory.forget", {"pattern": "description"})

    assert listed["lines"] == []
    refused = _refused(
        daemon, "memory.forget", {"pattern": "description", "confirm": True, "base": listed["head"]}
    )
    assert refused.code == "nothing_to_forget"


def test_forget_removes_nothing_when_the_lines_matching_now_are_not_those_listed(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "coffee black"})
    listed = daemon.result("memory.forget", {"pattern": "coffee"})
    daemon.result("memory.remember", {"text": "coffee at nine"})  # memory moved meanwhile
    before, files = _log(daemon), _files(agent)

    refused = _refused(
        daemon, "memory.forget", {"pattern": "coffee", "confirm": True, "base": listed["head"]}
    )

    assert refused.code == "memory_conflict" and "nothing was removed" in refused.message
    assert _log(daemon) == before and _files(agent) == files


def test_forget_goes_ahead_when_memory_moved_elsewhere_since_the_listing(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "coffee black"})
    listed = daemon.result("memory.forget", {"pattern": "coffee"})
    daemon.result("memory.remember", {"text": "likes tea"})  # above nothing, matches nothing

    done = daemon.result(
        "memory.forget", {"pattern": "coffee", "confirm": True, "base": listed["head"]}
    )

    assert [line["text"] for line in done["lines"]] == ["- coffee black"]
    assert "coffee" not in _human(daemon) and "- likes tea" in _human(daemon)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"pattern": "x", "confirm": True}, "malformed_request"),
        ({"pattern": "x", "confirm": True, "base": "HEAD"}, "malformed_request"),
        ({"pattern": "x", "confirm": True, "base": "0" * 40}, "unknown_revision"),
        ({"pattern": ""}, "malformed_request"),
        ({"pattern": "x", "path": "../x.md"}, "memory_path"),
        ({"pattern": "x", "path": "notes/none.md"}, "memory_path"),
        ({"pattern": "x", "via": "mcp"}, "malformed_request"),
    ],
)
def test_a_bad_forget_is_refused_and_changes_nothing(
    daemon: DaemonRunner, agent: dict[str, Any], params: dict[str, Any], code: str
) -> None:
    before = _log(daemon)
    assert _refused(daemon, "memory.forget", params).code == code
    assert _log(daemon) == before


@pytest.mark.parametrize("op", ["remember", "forget"])
def test_notes_wait_for_the_memory_lock(
    daemon: DaemonRunner, agent: dict[str, Any], op: str
) -> None:
    daemon.result("memory.remember", {"text": "coffee black"})
    lock = memory_lock(Path(agent["memory_dir"]))
    head = _log(daemon)[0]["sha"]
    params: dict[str, Any] = {"text": "likes tea"}
    if op == "forget":
        params = {"pattern": "coffee", "confirm": True, "base": head}
    answers: list[dict[str, Any]] = []

    with file_lock(lock):  # a reflection merging, say
        thread = threading.Thread(
            target=lambda: answers.append(daemon.result(f"memory.{op}", params))
        )
        thread.start()
        wait_for(lambda: descriptors_on(lock) == 2, f"the {op} to wait for the memory lock")
        assert _log(daemon)[0]["sha"] == head, "it committed while the lock was held"
    thread.join(ceiling(30))

    [answer] = answers
    assert answer["commit"] == _log(daemon)[0]["sha"] != head


def test_agentctl_forget_asks_off_a_terminal_for_yes_and_removes_nothing_without(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "coffee black"})
    before = _log(daemon)

    asked = run_agentctl("forget", "coffee")

    assert asked.returncode == 2
    assert asked.stdout == f"{HUMAN}:6: - coffee black\n"
    assert "pass --yes to remove these lines" in asked.stderr
    assert _log(daemon) == before
    nothing = run_agentctl("forget", "espresso", "-y")
    assert (nothing.returncode, nothing.stderr) == (1, 'no memory line contains "espresso"\n')

    done = run_agentctl("forget", "coffee", "--yes")

    [newest, *_] = _log(daemon)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{HUMAN}:6: - coffee black\n"
        f"forgot 1 line in {newest['short_sha']}; undo it with "
        f"`agentctl memory revert {newest['short_sha']}`\n"
    )


def test_agentctl_forget_on_a_terminal_removes_only_on_yes(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("memory.remember", {"text": "coffee black"})
    before = _log(daemon)

    declined = Terminal("-m", "agentd.client", "forget", "coffee", env=dict(os.environ))
    try:
        declined.expect("Forget this line? One commit removes them")
        declined.expect("[y/N] ")
        declined.type("n\r")
        assert declined.exit_status() == 1
        assert "nothing was removed" in declined.text
    finally:
        declined.close()
    assert _log(daemon) == before

    accepted = Terminal("-m", "agentd.client", "forget", "coffee", env=dict(os.environ))
    try:
        accepted.expect("[y/N] ")
        accepted.type("y\r")
        assert accepted.exit_status() == 0
        assert "forgot 1 line in" in accepted.text
    finally:
        accepted.close()
    assert "coffee" not in _human(daemon)
