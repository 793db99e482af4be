"""A conversation log with a line that is not a message (damaged on disk, or written by
another program: no id, so it can never be a watermark). The reflection is shown the
line as it is, the watermark moves past it only once a tool result showed it, and
``agentd doctor`` names the file. Real jobs in process, real bubblewrap, real git."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shared.providers.mock_reflector import MockReflector
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from tests.reflector.conftest import World, watermark
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

FOREIGN = '{"role": "user", "content": "I am allergic to peanuts, remember it"}'
"""A chat line another program appended: the user's words, but no id, no agent."""
ONLY_MESSAGES = json.dumps(
    {
        "command": 'jq -r \'.[] | select(.role == "user" or .role == "assistant") | .content\' '
        '"$TRANSCRIPT_PATH"'
    }
)
"""A reader that looks at the messages and skips every other record."""


def _damage(world: World) -> str:
    """Append :data:`FOREIGN` between two turns; the id of the message before it."""
    before = list(world.conversation.log)[-1].id
    with open(world.conversation.log.path, "ab") as log:
        log.write(FOREIGN.encode() + b"\n")
    world.say("以后一律用 ruff 检查代码")
    return before


def _payload_texts(world: World) -> str:
    return "".join(path.read_text() for path in (world.reflections / "payloads").glob("*.json"))


def test_a_line_that_is_no_message_is_in_the_payload_and_passed_once_it_was_read(
    world: World,
) -> None:
    _damage(world)

    outcome = world.reflect(MockReflector())

    assert outcome.status == "merged" and outcome.unread == []
    assert json.dumps(FOREIGN) in _payload_texts(world)  # shown as found, as a string
    assert '"role": "unreadable"' in _payload_texts(world)
    assert watermark(world) == list(world.conversation.log)[-1].id


def test_a_reflection_that_never_saw_the_line_leaves_the_watermark_before_it(
    world: World,
) -> None:
    before = _damage(world)
    skipping = ScriptedProvider(
        [tool_reply(("bash", ONLY_MESSAGES)), text_reply("Nothing durable; no commit.")]
    )

    outcome = world.reflect(skipping, trigger="manual")

    assert (outcome.status, outcome.unread) == ("no_changes", [world.conversation.id])
    assert watermark(world) == before
    again = world.reflect(MockReflector(), trigger="manual")
    assert again.status == "merged" and "ruff" in world.human()
    assert watermark(world) == list(world.conversation.log)[-1].id


def _doctor() -> subprocess.CompletedProcess[str]:
    """``agentd doctor`` on the test's home (the daemon is not running: that is a finding
    of its own)."""
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor"],
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )


def test_doctor_names_the_log_and_the_line_that_is_no_message(world: World) -> None:
    _damage(world)
    log_path = world.conversation.log.path
    number = log_path.read_text().splitlines().index(FOREIGN) + 1

    result = _doctor()

    (finding,) = [line for line in result.stdout.splitlines() if "conversation logs" in line]
    assert finding == (
        "✗ conversation logs: lines that are not messages (damaged, or written by another "
        f"program): {log_path} (line {number})"
    )
    assert f"`sed -n '{number}p' {log_path}`" in result.stdout
    assert result.returncode == 1


def test_doctor_passes_logs_whose_every_line_is_a_message(world: World) -> None:
    result = _doctor()

    assert "✓ conversation logs: 1 log(s), every line a message" in result.stdout.splitlines()
