"""Memory edited by hand: ``agentctl memory edit`` runs the user's editor and commits the
result as the user; an edit left uncommitted in the checkout is named, with the command
that commits it, by ``agentctl status`` and ``agentd doctor``.

The editor is a small shell script (``EDITOR``), driving the real agentctl.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.stack.doctor import check_uncommitted_memory
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling

HUMAN = "system/human.md"


def _editing(script: str) -> dict[str, str]:
    """agentctl's environment with ``script`` as the editor (``$1`` is the file)."""
    env = {k: v for k, v in os.environ.items() if k != "VISUAL"}
    env["EDITOR"] = f"sh -c {shlex.quote(script)} --"
    return env


def _appending(line: str) -> dict[str, str]:
    return _editing(f"printf '%s\\n' {shlex.quote(line)} >> \"$1\"")


def _log(daemon: DaemonRunner) -> list[dict[str, Any]]:
    return daemon.result("memory.log", {})["commits"]


@pytest.fixture
def agent(daemon: DaemonRunner) -> dict[str, Any]:
    daemon.start()
    daemon.result("chat", {"text": "hello"})
    return daemon.result("agent.show", {})


def test_an_edit_is_committed_as_the_user_and_the_next_turn_is_told(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    edited = run_agentctl("memory", "edit", HUMAN, env=_appending("- prefers tabs"))

    assert edited.returncode == 0, edited.stderr
    [newest, *_] = _log(daemon)
    assert edited.stdout == f"committed {newest['short_sha']} ({HUMAN})\n"
    assert (newest["author"], newest["subject"]) == ("user", f"edit {HUMAN} by hand")
    assert daemon.result("memory.show", {"path": HUMAN})["text"].endswith("- prefers tabs\n")
    assert daemon.result("memory.read", {"path": HUMAN})["blob"] is not None
    lines = daemon.call("chat", {"text": "what do I prefer?"})
    [update] = [line["data"] for line in lines if line.get("event") == "memory_update"]
    assert update["files"] == [HUMAN] and update["to"] == newest["sha"]


def test_a_new_file_starts_with_frontmatter_naming_it(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    edited = run_agentctl("memory", "edit", "notes/project.md", env=_appending("Ships in May."))

    assert edited.returncode == 0, edited.stderr
    text = daemon.result("memory.show", {"path": "notes/project.md"})["text"]
    assert text == "---\nname: project\ndescription: ''\n---\nShips in May.\n"


def test_an_unchanged_file_and_a_failed_editor_commit_nothing(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    before = _log(daemon)

    unchanged = run_agentctl("memory", "edit", HUMAN, env=_editing("true"))
    failed = run_agentctl("memory", "edit", HUMAN, env=_editing('echo x >> "$1"; exit 3'))

    assert (unchanged.returncode, unchanged.stdout) == (
        0,
        f"{HUMAN} is unchanged; nothing to commit\n",
    )
    assert failed.returncode == 1
    assert "the editor exited with status 3; nothing was committed" in failed.stderr
    assert _log(daemon) == before


def test_a_file_changed_while_it_was_edited_is_refused_and_the_text_is_kept(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    checkout = Path(agent["memory_dir"], HUMAN)
    meanwhile = (
        f"printf 'theirs\\n' >> {shlex.quote(str(checkout))}; "
        f"{shlex.quote(sys.executable)} -m agentd.client memory commit -m theirs"
    )
    edited = run_agentctl(
        "memory", "edit", HUMAN, env=_editing(f"printf 'mine\\n' >> \"$1\"; {meanwhile}")
    )

    assert edited.returncode == 1
    assert "memory_conflict: system/human.md changed in memory while you edited it" in edited.stderr
    kept = edited.stderr.split("your text is kept in ", 1)[1].split("\n", 1)[0]
    assert Path(kept).read_text().endswith("mine\n")
    Path(kept).unlink()
    assert _log(daemon)[0]["subject"] == "theirs"
    assert "mine" not in daemon.result("memory.show", {"path": HUMAN})["text"]


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../outside.md", "memory_path"),
        (".git/config.md", "memory_path"),
        ("notes.txt", "memory_path"),
    ],
)
def test_a_path_outside_memory_or_not_markdown_is_refused(
    daemon: DaemonRunner, agent: dict[str, Any], path: str, code: str
) -> None:
    edited = run_agentctl("memory", "edit", path, env=_editing("true"))
    assert edited.returncode == 1 and edited.stderr.startswith(f"{code}: ")


def test_an_edit_left_uncommitted_is_named_with_the_command_that_commits_it(
    daemon: DaemonRunner, agent: dict[str, Any], agentd_home: Path
) -> None:
    with open(Path(agent["memory_dir"], HUMAN), "a") as handle:
        handle.write("- edited in the checkout\n")
    command = "agentctl memory commit --agent default"

    status = run_agentctl("status")
    finding = check_uncommitted_memory(Settings(home=agentd_home))

    assert status.returncode == 0, status.stderr
    [line] = [line for line in status.stdout.splitlines() if HUMAN in line]
    assert command in line
    assert not finding.ok and HUMAN in finding.detail and command in finding.fix
    assert run_agentctl("memory", "commit").returncode == 0
    assert check_uncommitted_memory(Settings(home=agentd_home)).ok
    assert not any(HUMAN in line for line in run_agentctl("status").stdout.splitlines())


def test_the_editor_may_be_a_command_with_arguments(
    daemon: DaemonRunner, agent: dict[str, Any], tmp_path: Path
) -> None:
    """``$VISUAL`` wins over ``$EDITOR``, and holds a command line (``code --wait``)."""
    script = tmp_path / "editor"
    script.write_text('#!/bin/sh\n[ "$1" = --wait ] && printf "via visual\\n" >> "$2"\n')
    script.chmod(0o700)
    env = {**_editing("exit 9"), "VISUAL": f"{script} --wait"}

    edited = subprocess.run(
        [sys.executable, "-m", "agentd.client", "memory", "edit", HUMAN],
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )

    assert edited.returncode == 0, edited.stderr
    assert daemon.result("memory.show", {"path": HUMAN})["text"].endswith("via visual\n")
