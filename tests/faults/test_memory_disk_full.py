"""``memory.write`` (``agentctl memory edit``) on a full disk: the typed ``disk_full``, and
the checkout as it was, so the next unrelated edit commits nothing of the refused one.

Both places the disk can run out are tried: writing the file itself, and git storing it
(the file fits, its object does not).
"""

from __future__ import annotations

import random
import string
import subprocess
from pathlib import Path
from typing import Any

from tests.support.daemon import DaemonRunner
from tests.support.small_disk import SmallDisk

HUMAN = "system/human.md"


def _write(daemon: DaemonRunner, path: str, text: str) -> dict[str, Any]:
    """The final line of a ``memory.write`` of ``text`` over what ``path`` holds now."""
    blob = daemon.result("memory.read", {"path": path})["blob"]
    return daemon.call("memory.write", {"path": path, "text": text, "base": blob})[-1]


def _checkout(daemon: DaemonRunner) -> Path:
    return Path(daemon.result("memory.path", {})["path"])


def _noise(size: int) -> str:
    """Text git cannot compress much: its object takes about as much room as the file."""
    rng = random.Random(size)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(size))


def _git(memory: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(memory), *args], capture_output=True, text=True, check=True
    ).stdout


def _assert_untouched(daemon: DaemonRunner, committed: str) -> None:
    memory = _checkout(daemon)
    assert (memory / HUMAN).read_text() == committed
    assert daemon.result("memory.show", {"path": HUMAN})["text"] == committed
    assert _git(memory, "status", "--porcelain", "--untracked-files=all") == "", (
        "the refused edit left something in the checkout"
    )


def _next_edit_commits_only_itself(daemon: DaemonRunner, committed: str) -> None:
    other = "---\nname: other\ndescription: unrelated\n---\nan unrelated note\n"
    answer = _write(daemon, "notes/other.md", other)
    assert answer["ok"], answer
    assert daemon.result("memory.show", {"path": HUMAN})["text"] == committed
    changed = _git(_checkout(daemon), "show", "--name-only", "--format=", "HEAD").split()
    assert changed == ["notes/other.md"]


def test_a_hand_edit_the_full_disk_refuses_answers_disk_full_and_leaves_the_file_as_it_was(
    small_disk: SmallDisk, daemon_on_small_disk: DaemonRunner
) -> None:
    daemon = daemon_on_small_disk
    daemon.start()
    committed = daemon.result("memory.show", {"path": HUMAN})["text"]

    small_disk.fill()
    refused = _write(daemon, HUMAN, committed + "- a long line the disk refuses\n" * 5000)
    small_disk.free()

    assert refused["error"]["code"] == "disk_full", refused
    assert "free" in refused["error"]["message"]
    _assert_untouched(daemon, committed)
    _next_edit_commits_only_itself(daemon, committed)


def test_a_hand_edit_whose_commit_the_full_disk_refuses_leaves_nothing_behind(
    small_disk: SmallDisk, daemon_on_small_disk: DaemonRunner
) -> None:
    daemon = daemon_on_small_disk
    daemon.start()
    committed = daemon.result("memory.show", {"path": HUMAN})["text"]
    text = committed + _noise(400_000)

    small_disk.fill(leave=len(text.encode()) + 4096)
    refused = _write(daemon, HUMAN, text)
    small_disk.free()

    assert refused["error"]["code"] == "disk_full", refused
    _assert_untouched(daemon, committed)
    _next_edit_commits_only_itself(daemon, committed)
