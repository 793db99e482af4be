"""Provenance and undo on the seed's reflection walkthrough: the user said three things, a
reflection (the mock reflector, in the sandbox, in process) merged two of them into
memory, and the daemon answers ``memory why``, ``blame``, ``diff`` and ``revert``."""

from __future__ import annotations

from typing import Any

import pytest

from shared.clock import user_zone
from shared.errors import ClientError
from shared.message_refs import short_id
from shared.providers.mock_reflector import MockReflector
from tests.reflector.conftest import World, watermark
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import wait_for

PNPM = "今天我们决定以后一律用 pnpm"
ADA = "ada"
"""The walkthrough's agent (``world`` names it)."""


@pytest.fixture
def reflected(world: World, daemon: DaemonRunner) -> World:
    """The walkthrough after its reflection merged, with the daemon serving that home and
    its recall index built (until then ``why`` finds no evidence and says it may miss some)."""
    assert world.reflect(MockReflector()).status == "merged"
    daemon.start(clock=world.clock)
    wait_for(lambda: _recall_ready(daemon), "the recall index to be built")
    return world


def _recall_ready(daemon: DaemonRunner) -> bool:
    return all(agent["recall"]["state"] == "ready" for agent in daemon.result("status")["agents"])


def pnpm_line(world: World) -> str:
    return f"- {world.clock().astimezone(user_zone()[0]).date()} 我们决定以后一律用 pnpm"


def error_code(daemon: DaemonRunner, op: str, params: dict[str, Any]) -> str:
    with pytest.raises(ClientError) as refused:
        daemon.result(op, {"agent": ADA, **params})
    return refused.value.code


@pytest.mark.slow
def test_why_pnpm_prints_the_line_the_reflection_and_the_user_s_words(
    reflected: World,
) -> None:
    said = next(m for m in reflected.conversation.log if m.content == PNPM)
    reflection = reflected.git("log", "-1", "--format=%h %s").strip()

    result = run_agentctl("memory", "why", "pnpm", "--agent", ADA)

    assert result.returncode == 0, result.stderr
    first, commit, reflected_on, evidence, *rest = result.stdout.splitlines()
    assert first.startswith("system/human.md:") and first.endswith(f": {pnpm_line(reflected)}")
    sha, subject = reflection.split(" ", 1)
    assert commit.split()[0] == sha and "reflection" in commit and commit.endswith(subject)
    assert reflected_on.startswith("  reflected on messages msg-")
    assert evidence.split(maxsplit=2)[1:] == [short_id(said.id), PNPM]
    assert all(PNPM not in line for line in rest), "the best match is shown once, first"


def test_blame_names_the_reflection_job_for_its_lines(
    reflected: World, daemon: DaemonRunner
) -> None:
    lines = daemon.result("memory.blame", {"agent": ADA, "path": "system/human.md"})["lines"]
    (line,) = [line for line in lines if line["text"] == pnpm_line(reflected)]
    provenance = line["commit"]["provenance"]
    assert provenance["kind"] == "reflection"
    assert provenance["job_id"] and provenance["reflected_first"] <= provenance["reflected_last"]
    assert lines[0]["commit"]["provenance"]["kind"] == "initial"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("op", "params", "code"),
    [
        (
            "memory.blame",
            {"path": "system/human.md", "rev": "HEAD:system/human.md"},
            "unknown_revision",
        ),
        ("memory.blame", {"path": "system/human.md", "rev": "--output=/tmp/x"}, "unknown_revision"),
        ("memory.blame", {"path": "../../agent.json"}, "memory_path"),
        ("memory.diff", {"rev": "nosuchbranch"}, "unknown_revision"),
        ("memory.revert", {"commit": "HEAD:system/human.md"}, "unknown_revision"),
        ("memory.revert", {"commit": "0" * 40}, "unknown_revision"),
    ],
)
def test_path_like_and_unknown_revisions_are_typed_errors_that_change_nothing(
    reflected: World, daemon: DaemonRunner, op: str, params: dict[str, Any], code: str
) -> None:
    head = reflected.git("rev-parse", "HEAD").strip()
    assert error_code(daemon, op, params) == code
    assert reflected.git("rev-parse", "HEAD").strip() == head
    assert reflected.git("status", "--porcelain") == ""


@pytest.mark.slow
def test_reverting_a_merged_reflection_drops_its_lines_tells_the_next_turn_keeps_the_watermark(
    reflected: World, daemon: DaemonRunner
) -> None:
    daemon.result("chat", {"agent": ADA, "text": "你好"})  # this turn sees the merged memory
    other = daemon.result("conversation.create", {"agent": ADA})["id"]
    daemon.result("chat", {"agent": ADA, "conversation": other, "text": "早"})  # and this one
    mark = watermark(reflected)
    reflection = reflected.git("rev-parse", "HEAD").strip()

    done = daemon.result("memory.revert", {"agent": ADA, "commit": reflection[:7]})

    assert done["reverted"]["sha"] == reflection
    assert done["commit"]["author"] == "user"
    assert done["commit"]["provenance"] == {
        **done["commit"]["provenance"],
        "kind": "user",
        "reverts": reflection,
    }
    human = daemon.result("memory.show", {"agent": ADA, "path": "system/human.md"})["text"]
    assert "pnpm" not in human and "tabs" not in human
    diff = daemon.result("memory.diff", {"agent": ADA})
    assert (diff["from"], [c["sha"] for c in diff["commits"]]) == (
        reflection,
        [done["commit"]["sha"]],
    )
    assert f"-{pnpm_line(reflected)}" in diff["diff"].splitlines()

    asked = daemon.call("chat", {"agent": ADA, "text": "你知道我什么？"})

    (update,) = [line["data"] for line in asked if line.get("event") == "memory_update"]
    assert update["files"] == ["system/human.md"]
    assert "pnpm" not in asked[-1]["result"]["text"]
    elsewhere = daemon.call("chat", {"agent": ADA, "conversation": other, "text": "还记得吗？"})
    told = [line["data"]["files"] for line in elsewhere if line.get("event") == "memory_update"]
    assert told == [["system/human.md"]], "every conversation's next turn is told"
    assert watermark(reflected) == mark
    assert reflected.reflect(MockReflector()).status == "no_changes"
    assert "pnpm" not in reflected.human(), "the reverted slice is not reflected again"


def test_a_revert_that_conflicts_with_a_later_edit_is_refused_and_changes_nothing(
    reflected: World, daemon: DaemonRunner
) -> None:
    reflection = reflected.git("rev-parse", "HEAD").strip()
    editable = daemon.result("memory.read", {"agent": ADA, "path": "system/human.md"})
    edited = editable["text"].replace(pnpm_line(reflected), "- 一律用 pnpm，不用 npm")
    params = {"path": "system/human.md", "text": edited, "base": editable["blob"]}
    daemon.result("memory.write", {"agent": ADA, **params})
    head, human = reflected.git("rev-parse", "HEAD").strip(), reflected.human()

    assert error_code(daemon, "memory.revert", {"commit": reflection}) == "revert_conflict"

    assert (reflected.git("rev-parse", "HEAD").strip(), reflected.human()) == (head, human)
    assert reflected.git("status", "--porcelain") == ""
    (line,) = [
        line
        for line in daemon.result("memory.blame", {"agent": ADA, "path": "system/human.md"})[
            "lines"
        ]
        if "npm" in line["text"]
    ]
    assert line["commit"]["provenance"]["kind"] == "user"
