"""A reflection consumes only what its sub-agent read: long conversations are shown in
parts that fit a tool result, a job shows at most its budget, and the rest is the next
job's — so every fact said lands, however much was said (issue 9, item 1)."""

from __future__ import annotations

import json
import shutil

import pytest

from shared.providers.mock_reflector import MockReflector
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection.state import load_state
from tests.reflector.conftest import World, watermark


def _facts(count: int) -> list[str]:
    return [f"I always want fact-{n:04d} remembered" for n in range(count)]


def _reflect_until_read(world: World) -> list[str]:
    """Run jobs the way the daemon does: while a consumed outcome left messages unread,
    the next job starts at once. The statuses, in order."""
    statuses = []
    for _ in range(50):
        outcome = world.reflect(MockReflector(), trigger="manual")
        statuses.append(outcome.status)
        if not outcome.unread:
            return statuses
        assert outcome.status in ("merged", "no_changes"), outcome
    raise AssertionError(f"still unread after 50 jobs: {statuses}")


def _memory_lines(world: World) -> list[str]:
    return [line for line in world.human().splitlines() if "fact-" in line]


def _part_sizes(world: World) -> list[int]:
    return [
        len(path.read_text()) for path in (world.reflections / "payloads").glob("payload-*-*.json")
    ]


@pytest.mark.slow
def test_150_facts_said_with_the_trigger_off_all_land_with_one_manual_reflection(
    world: World,
) -> None:
    facts = _facts(150)
    world.say(*facts)

    assert _reflect_until_read(world) == ["merged"]

    assert _memory_lines(world) == [f"- {fact}" for fact in facts]
    assert watermark(world) == list(world.conversation.log)[-1].id
    assert max(_part_sizes(world)) <= 24_000  # each part fits in what bash shows


@pytest.mark.slow
def test_1000_facts_land_exactly_once_over_several_jobs(world: World) -> None:
    facts = _facts(1000)
    world.say(*facts)

    statuses = _reflect_until_read(world)

    assert len(statuses) > 1 and set(statuses) == {"merged"}
    assert _memory_lines(world) == [f"- {fact}" for fact in facts]
    state = load_state(world.conversation.directory)
    assert state.watermark == list(world.conversation.log)[-1].id
    assert state.steps_since_last_reflection == 0
    assert world.reflect(MockReflector()).reason == "no_payload"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_a_reader_that_reads_only_the_first_part_consumes_only_that_part(world: World) -> None:
    facts = _facts(300)
    world.say(*facts)
    first_part = json.dumps(
        {"command": 'cat "$(jq -r ".transcripts[0].payload_path" "$TRANSCRIPT_PATH")"'}
    )
    lazy = ScriptedProvider([tool_reply(("bash", first_part)), text_reply("Nothing durable.")])

    outcome = world.reflect(lazy)

    assert (outcome.status, outcome.unread) == ("no_changes", [world.conversation.id])
    read_up_to = watermark(world)
    assert read_up_to is not None
    messages = list(world.conversation.log)
    index = next(i for i, m in enumerate(messages) if m.id == read_up_to)
    assert 0 < index < len(messages) - 1
    assert all("fact-" not in line for line in world.human().splitlines())

    _reflect_until_read(world)

    remembered = [line.removeprefix("- ") for line in _memory_lines(world)]
    unread_by_the_lazy_one = [m.content for m in messages[index + 1 :] if m.role == "user"]
    assert remembered == unread_by_the_lazy_one  # the rest landed; nothing twice


def test_the_harness_tells_the_sub_agent_that_reading_is_checked(world: World) -> None:
    world.say(*_facts(3))
    world.reflect(MockReflector())
    (transcript,) = (world.reflections / "subagents").glob("*/messages.jsonl")
    task = json.loads(transcript.read_text().splitlines()[0])["content"]
    assert "only the messages whose text came back" in task
    assert "Core memory budget" in task
