"""A reflector that destroys core memory is held for the user, never merged (issue 21, item 3).

The attacker is a scripted reflection sub-agent: it reads the transcript (so its run earns
success), then runs ``git rm system/human.md system/persona.md`` (or wipes ``human.md``'s
body, or most of memory) in its real sandboxed clone and commits. The job runs through the
real pipeline: real bubblewrap, real git. What must hold: the outcome is ``held``, memory's
HEAD and files are as they were, the proposal's commits are kept under ``refs/proposals/``
with a record naming why, and the watermark moved (the transcript was reflected). A
consolidation that is not destructive still merges; an explicit-mode agent never sees a
held proposal; the answers (accept merges into the current memory, reject drops) each
happen once.
"""

from __future__ import annotations

import json

import pytest

from agentd.jobs.hold import held_message
from shared import sandbox
from shared.errors import ProposalAnswered, ProposalConflict, UnknownProposal
from shared.memory.content import MemoryLimits
from shared.memory.proposal_answers import accept, reject
from shared.memory.proposals import Proposal, Proposals
from shared.memory.repo import MemoryRepo
from shared.models.reflection import ReflectionOutcome
from shared.providers.mock_reflector import MockReflector
from shared.providers.scripted import ScriptedProvider
from shared.reflection.backoff import load_backoff
from shared.reflection.policy import ReflectionOverrides
from shared.store.agents import AgentStore
from shared.store.layout import Layout
from tests.reflector.conftest import READ, World, watermark
from tests.reflector.conftest import world as world  # the fixture
from tests.security.hostile import FORGET, WIPE_HUMAN, attacker
from tests.support.openai_server import FakeOpenAIServer, chat_completion, tool_call

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)

HUMAN_BODY = "- Name: Ada Lovelace.\n- Prefers tabs.\n- Deploys with pnpm.\n"


def _head(world: World) -> str:
    return world.git("rev-parse", "HEAD").strip()


def _proposals(world: World) -> Proposals:
    return Proposals(MemoryRepo(world.memory), world.reflections / "proposals")


def _commit_by_hand(world: World, path: str, text: str) -> None:
    target = world.memory / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    world.git("add", "-A")
    world.git("-c", "user.name=user", "-c", "user.email=user@agentd.local", "commit", "-qm", path)


def _give_human_a_body(world: World) -> None:
    _commit_by_hand(
        world,
        "system/human.md",
        f"---\nname: human\ndescription: What I know about the user.\n---\n{HUMAN_BODY}",
    )


def _held(world: World, command: str) -> tuple[ReflectionOutcome, str]:
    before = _head(world)
    outcome = world.reflect(attacker(command))
    return outcome, before


def test_a_reflector_that_deletes_core_memory_is_held_and_memory_is_untouched(
    world: World,
) -> None:
    _give_human_a_body(world)
    outcome, before = _held(world, FORGET)

    assert (outcome.status, outcome.reason) == ("held", "system_file_deleted")
    assert "deletes system/human.md and system/persona.md" in outcome.message
    assert "`agentctl memory proposals --agent ada`" in outcome.message
    assert outcome.commits == []
    assert _head(world) == before
    assert (world.memory / "system" / "human.md").read_text().endswith(HUMAN_BODY)
    assert (world.memory / "system" / "persona.md").is_file()
    assert world.git("status", "--porcelain") == ""
    assert world.git("branch", "--list", "reflection/*") == ""
    [proposal] = _proposals(world).held()
    assert proposal.id == outcome.reflection_id
    assert proposal.base == before
    assert proposal.destruction.deleted == ["system/human.md", "system/persona.md"]
    kept = world.git("rev-parse", f"refs/proposals/{proposal.id}").strip()
    assert kept == proposal.head != before
    changed = world.git("diff", "--name-status", proposal.base, proposal.head).split("\n")
    assert changed[:2] == ["D\tsystem/human.md", "D\tsystem/persona.md"]
    logged = (world.reflections / "log.jsonl").read_text().splitlines()
    assert ReflectionOutcome.model_validate_json(logged[-1]).status == "held"


@pytest.mark.sdk  # imports litellm
@pytest.mark.slow
def test_the_attack_over_the_real_openai_compatible_path_is_held(world: World) -> None:
    """The same model, spoken to as litellm speaks to any OpenAI-compatible server."""
    from shared.providers.litellm_provider import LiteLLMProvider

    commit = f'{FORGET} && git -C "$MEMORY_DIR" commit -qm "chore(reflection): tidy up"'
    with FakeOpenAIServer() as server:
        for number, command in enumerate((READ, json.dumps({"command": commit}))):
            call = tool_call("bash", command, id=f"call-{number}")
            server.enqueue(body=chat_completion(None, tool_calls=[call]))
        server.enqueue(body=chat_completion("Consolidated memory: removed stale files."))
        provider = LiteLLMProvider(
            model="openai/test-model",
            api_base=server.url,
            api_key="sk-test",
            context_window=32_000,
            block_remote=True,
        )
        before = _head(world)
        outcome = world.reflect(provider)
        calls = len(server.requests)

    assert (outcome.status, outcome.reason) == ("held", "system_file_deleted"), outcome.message
    assert calls == 3
    assert _head(world) == before
    assert (world.memory / "system" / "human.md").is_file()


@pytest.mark.slow
def test_while_held_the_watermark_has_moved_and_the_next_reflection_does_not_redo_it(
    world: World,
) -> None:
    outcome, _ = _held(world, FORGET)

    assert outcome.status == "held"
    assert watermark(world) == list(world.conversation.log)[-1].id
    assert load_backoff(world.reflections).retry_at is None
    assert world.reflect(attacker(FORGET)).reason == "no_payload"
    world.say("以后一律用 tabs 缩进")
    after = world.reflect(MockReflector())
    assert after.status == "merged"
    assert (world.memory / "system" / "persona.md").is_file()
    assert len(_proposals(world).held()) == 1


@pytest.mark.slow
def test_emptying_human_md_without_deleting_it_is_held_too(world: World) -> None:
    _give_human_a_body(world)
    outcome, before = _held(world, WIPE_HUMAN)

    assert (outcome.status, outcome.reason) == ("held", "system_file_emptied")
    assert "empties system/human.md" in outcome.message
    assert _head(world) == before
    assert (world.memory / "system" / "human.md").read_text().endswith(HUMAN_BODY)


def _facts(world: World, count: int) -> None:
    facts = "".join(f"- fact {n}: module {n} builds with pnpm\n" for n in range(count))
    _commit_by_hand(world, "notes/facts.md", f"---\nname: facts\ndescription: facts\n---\n{facts}")


def _keep_lines(lines: int) -> str:
    """Keep the first ``lines`` lines of notes/facts.md (its frontmatter is 4)."""
    return (
        f'cd "$MEMORY_DIR" && head -n {lines} notes/facts.md > ../kept && '
        "cat ../kept > notes/facts.md && rm ../kept && git add -A"
    )


@pytest.mark.slow
@pytest.mark.parametrize(("share", "status"), [(None, "held"), ("0.9", "merged")])
def test_removing_a_large_share_of_memory_is_held_at_the_configured_share(
    world: World, monkeypatch: pytest.MonkeyPatch, share: str | None, status: str
) -> None:
    _facts(world, 40)  # memory: 54 lines
    if share is not None:
        monkeypatch.setenv("AGENTD_REFLECTION_HOLD_SHARE", share)

    outcome = world.reflect(attacker(_keep_lines(7)))  # removes 37 lines

    assert outcome.status == status, outcome.message
    if status == "held":
        assert outcome.reason == "lines_removed"
        assert "removes 37 of memory's 54 lines (net), more than 30%" in outcome.message
        assert len((world.memory / "notes" / "facts.md").read_text().splitlines()) == 44


def test_a_consolidation_of_a_small_memory_is_not_held(world: World) -> None:
    """Deleting a 10-line notes file is 45% of this 22-line memory, but not more than
    MIN_REMOVED_LINES: a small memory is not held for every tidy-up."""
    _give_human_a_body(world)
    _facts(world, 6)
    forget_notes = 'cd "$MEMORY_DIR" && git rm -q notes/facts.md'

    outcome = world.reflect(attacker(forget_notes, "chore(reflection): fold facts into human"))

    assert outcome.status == "merged", outcome.message
    assert not (world.memory / "notes" / "facts.md").exists()


def test_explicit_mode_holds_before_the_agent_is_asked_to_integrate(world: World) -> None:
    store = AgentStore(Layout(world.home))
    agent = store.get(world.agent.id)
    agent.reflection = ReflectionOverrides(merge="explicit")
    store.save(agent)
    integrator = ScriptedProvider([])  # any call to it would fail the job

    before = _head(world)
    outcome = world.reflect(attacker(FORGET), agent_provider=integrator)

    assert outcome.status == "held", outcome.message
    assert integrator.requests == []
    assert _head(world) == before


@pytest.mark.slow
def test_accept_merges_into_current_memory_once_and_keeps_the_watermark(world: World) -> None:
    outcome, _ = _held(world, FORGET)
    moved = watermark(world)
    _commit_by_hand(world, "notes/later.md", "---\nname: later\ndescription: x\n---\n- later\n")
    proposals = _proposals(world)

    answered = accept(proposals, outcome.reflection_id, limits=MemoryLimits(), now=world.clock())

    assert answered.state == "accepted" and answered.merge_commit == _head(world)
    assert not (world.memory / "system" / "human.md").exists()
    assert not (world.memory / "system" / "persona.md").exists()
    assert (world.memory / "notes" / "later.md").is_file()
    author, subject = world.git("log", "-1", "--format=%an|%s").strip().split("|")
    assert (author, subject) == ("user", f"merge(reflection): accept held proposal {answered.id}")
    trailers = world.git("log", "-1", "--format=%(trailers:only,unfold)")
    assert f"Job-ID: {answered.id}" in trailers and "Edited-By: user" in trailers
    assert world.git("for-each-ref", "refs/proposals/") == ""
    assert watermark(world) == moved
    assert proposals.held() == []
    with pytest.raises(ProposalAnswered, match="was accepted at"):
        accept(proposals, answered.id, limits=MemoryLimits(), now=world.clock())
    with pytest.raises(ProposalAnswered):
        reject(proposals, answered.id, now=world.clock())


@pytest.mark.slow
def test_reject_drops_it_and_memory_and_watermark_stay(world: World) -> None:
    outcome, before = _held(world, FORGET)
    moved = watermark(world)
    proposals = _proposals(world)

    answered = reject(proposals, outcome.reflection_id, now=world.clock())

    assert answered.state == "rejected"
    assert _head(world) == before
    assert (world.memory / "system" / "human.md").is_file()
    assert world.git("for-each-ref", "refs/proposals/") == ""
    assert watermark(world) == moved
    assert world.reflect(MockReflector()).reason == "no_payload"
    with pytest.raises(ProposalAnswered, match="was rejected at"):
        reject(proposals, answered.id, now=world.clock())
    with pytest.raises(UnknownProposal):
        reject(proposals, "20990101000000-deadbeef", now=world.clock())


@pytest.mark.slow
def test_an_accept_that_conflicts_with_later_memory_changes_nothing_and_stays_held(
    world: World,
) -> None:
    _give_human_a_body(world)
    outcome, _ = _held(world, WIPE_HUMAN)
    _commit_by_hand(
        world,
        "system/human.md",
        f"---\nname: human\ndescription: What I know about the user.\n---\n{HUMAN_BODY}- New.\n",
    )
    before = _head(world)

    with pytest.raises(ProposalConflict, match=r"system/human\.md"):
        accept(_proposals(world), outcome.reflection_id, limits=MemoryLimits(), now=world.clock())

    assert _head(world) == before
    assert world.git("status", "--porcelain") == ""
    assert [p.id for p in _proposals(world).held()] == [outcome.reflection_id]


def test_a_proposal_with_a_nested_repository_is_never_kept_for_acceptance(world: World) -> None:
    plant = (
        'cd "$MEMORY_DIR" && git rm -q system/human.md && mkdir -p notes/sub && '
        "git -C notes/sub init -q && git -C notes/sub -c user.name=x -c user.email=x@y "
        "commit -q --allow-empty -m x && git add notes/sub"
    )
    before = _head(world)
    outcome = world.reflect(attacker(plant))

    assert (outcome.status, outcome.reason) == ("failed", "nested_repository")
    assert _head(world) == before
    assert _proposals(world).held() == []


def test_the_message_names_how_to_answer() -> None:
    from shared.memory.destructive import Destruction

    proposal = Proposal(
        id="20270101000000-abcdef12",
        agent_id="agent-1",
        request_id="rq-1",
        created_at="2027-01-01T00:00:00Z",  # type: ignore[arg-type]
        base="a" * 40,
        head="b" * 40,
        destruction=Destruction(
            deleted=["system/human.md"],
            emptied=[],
            lines_before=10,
            added=0,
            removed=5,
            hold_share=0.3,
            files_changed=1,
        ),
    )
    message = held_message(proposal, "ada")
    assert message == (
        "Held for you, not merged: it deletes system/human.md. Review it with `agentctl "
        "memory proposals --agent ada`; `agentctl memory accept 20270101000000-abcdef12 "
        "--agent ada` merges it, `agentctl memory reject 20270101000000-abcdef12 --agent "
        "ada` drops it."
    )
