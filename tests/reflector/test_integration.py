"""Explicit merge mode's review, end to end in process: the agent works in the proposal
checkout, the harness lands and merges when it asks (``merge_proposal``), a conflict goes
back to it with ``memory/main`` brought up to date, and no memory lock is held while it
thinks. The reflector is the mock; the reviewing agent is scripted. Real git, real
bubblewrap (where it works), real files."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from shared.memory.repo import MemoryRepo
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.mock_reflector import MockReflector
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.store.locks import file_lock
from tests.reflector.conftest import World

MEANWHILE = "- a turn of the agent wrote this meanwhile"
TABS = "- 我更喜欢用 tabs 缩进"
RESOLVE = (
    "git merge -q memory/main; "
    "grep -v '^[<=>]\\{7\\}' system/human.md > \"$TMPDIR/resolved\" && "
    'cp "$TMPDIR/resolved" system/human.md && git add -A && '
    "git commit -qm 'merge: my latest memory into the proposal' && echo resolved"
)


def merge(summary: str = "take the proposal") -> ModelResponse:
    return tool_reply(("merge_proposal", json.dumps({"summary": summary})))


def bash(command: str) -> ModelResponse:
    return tool_reply(("bash", json.dumps({"command": command})))


def memory_moves_meanwhile(world: World, then: ModelResponse) -> Callable[..., ModelResponse]:
    """A reply that first does what the daemon does during the review, a memory commit
    under the memory lock (which must be free: the review holds none), then ``then``. It
    appends where the mock reflector does, so the two conflict."""

    def reply(_request: ModelRequest) -> ModelResponse:
        with MemoryRepo(world.memory) as repo, file_lock(repo.lock_path, timeout_s=2.0):
            human = world.memory / "system/human.md"
            human.write_text(human.read_text().rstrip("\n") + f"\n{MEANWHILE}\n")
            repo.commit_all("edit_file: update", author_name="ada", author_email="a@agentd.local")
        return then

    return reply


def tool_results(world: World) -> list[str]:
    (log,) = (world.reflections / "integrations").glob("*/messages.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [record["content"] for record in records if record.get("role") == "tool"]


@pytest.mark.slow
def test_a_conflict_goes_back_to_the_agent_which_merges_memory_in_and_is_merged(
    world: World,
) -> None:
    world.merge_explicitly()
    agent = ScriptedProvider(
        [memory_moves_meanwhile(world, merge()), bash(RESOLVE), merge(), text_reply("Merged.")]
    )

    outcome = world.reflect(MockReflector(), agent_provider=agent)

    conflict, resolved, merged = tool_results(world)
    assert conflict.startswith("not merged: the reflection's memory updates conflicted with")
    assert "memory/main now holds your latest memory" in conflict
    assert resolved.endswith("resolved")
    assert merged.startswith("Merged into your memory (now at ")
    assert outcome.status == "merged", outcome.message
    human = world.human()
    assert MEANWHILE in human and TABS in human and "<<<<<<<" not in human
    assert (
        world.git("log", "-1", "--format=%an|%s").strip()
        == "ada|merge(reflection): take the proposal"
    )
    resolution = world.git(
        "log", "-1", "--format=%an|%(trailers:only,unfold)", "--grep=my latest memory"
    ).strip()
    assert resolution == f"ada|Agent-ID: {world.agent.id}\nJob-ID: {outcome.reflection_id}"
    assert world.git("status", "--porcelain") == ""


def test_a_declined_proposal_ends_the_turn_and_changes_nothing(world: World) -> None:
    world.merge_explicitly()
    head = world.git("rev-parse", "HEAD")
    agent = ScriptedProvider(
        [tool_reply(("decline_proposal", json.dumps({"reason": "memory\nsays it already"})))]
    )

    outcome = world.reflect(MockReflector(), agent_provider=agent)

    assert (outcome.status, outcome.reason) == ("failed", "integration")
    assert outcome.message == (
        "the agent declined the proposal: memory says it already; the transcript can be retried."
    )
    assert world.git("rev-parse", "HEAD") == head
    assert not agent.replies, "declining ended the turn"


def test_merge_attempts_are_bounded(world: World) -> None:
    world.merge_explicitly()
    agent = ScriptedProvider(
        [
            memory_moves_meanwhile(world, merge()),
            merge(),
            merge(),
            merge(),
            text_reply("I give up."),
        ]
    )

    outcome = world.reflect(MockReflector(), agent_provider=agent)

    results = tool_results(world)
    assert [result.startswith("not merged:") for result in results[:3]] == [True] * 3
    assert results[3].startswith("merge_proposal was called 3 times already")
    assert (outcome.status, outcome.reason) == ("failed", "integration")
    assert TABS not in world.human() and MEANWHILE in world.human()


def test_uncommitted_edits_are_sent_back_and_the_committed_proposal_is_merged(
    world: World,
) -> None:
    world.merge_explicitly()
    agent = ScriptedProvider(
        [
            bash("echo '- reviewed' >> system/human.md"),
            merge(),
            bash("git commit -qam 'fix: note the review'"),
            merge(),
            text_reply("Merged."),
        ]
    )

    outcome = world.reflect(MockReflector(), agent_provider=agent)

    results = tool_results(world)
    assert results[1].startswith("the proposal checkout has uncommitted changes (system/human.md)")
    assert results[3].startswith("Merged into your memory")
    assert outcome.status == "merged"
    assert "- reviewed" in world.human()


def test_a_follow_up_holding_a_nested_repository_is_refused_and_fails_the_job(
    world: World,
) -> None:
    world.merge_explicitly()
    head = world.git("rev-parse", "HEAD")
    gitlink = (
        "mkdir -p notes/sub && "
        "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),notes/sub && "
        "git commit -qm 'feat: a sub-repository'"
    )
    agent = ScriptedProvider([bash(gitlink), merge(), text_reply("Could not merge.")])

    outcome = world.reflect(MockReflector(), agent_provider=agent)

    assert tool_results(world)[1].startswith(
        "not merged: notes/sub is a git repository inside memory"
    )
    assert (outcome.status, outcome.reason) == ("failed", "nested_repository")
    assert world.git("rev-parse", "HEAD") == head
