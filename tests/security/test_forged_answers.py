"""A worker's answer is checked before anything of it reaches memory: one that claims
commits it did not make, carries refs or objects besides its own commits (another agent's
memory, say), builds on another history, or answers other inputs is refused, and nothing is
merged or even stored in memory's object store.

The daemon prepares a real job and a real worker answers it honestly; the forger then
rewrites that answer and its bundle with real git, as a compromised worker could, and the
daemon settles the forgery."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.jobs.prepare import Prepared
from shared.memory import bundles
from shared.memory.clone import init_clone
from shared.memory.repo import MemoryRepo
from shared.models.reflection import ReflectionOutcome
from shared.providers.mock_reflector import MockReflector
from shared.reflection.backoff import load_backoff
from shared.reflection.job import JobAnswer
from tests.reflector.conftest import World, make_world, watermark
from tests.support.clock import FakeClock
from tests.support.reflection import DictTransfer, InProcess


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], input=stdin, capture_output=True, check=True
    )
    return done.stdout.decode().strip()


class Forger:
    """An honest answer to a real job, and the means to rewrite it."""

    def __init__(self, world: World, scratch: Path) -> None:
        self.world = world
        self.jobs: InProcess = world.jobs(MockReflector())
        self.request = world.request()
        prepared = self.jobs.prepare(self.request)
        assert isinstance(prepared, Prepared)
        self.prepared = prepared
        assert self.jobs.work(prepared) is not None
        transfer = self.jobs.transfer
        assert isinstance(transfer, DictTransfer)
        self.transfer = transfer
        raw, bundle = transfer.answers.pop(prepared.ticket.input_id)
        assert bundle is not None, "the honest run committed nothing"
        self.honest = JobAnswer.model_validate_json(raw)
        self.base = prepared.ticket.base_head
        self.clone = scratch / "forger"
        init_clone(self.clone, self.base, "forger@x")
        bundles.clone_snapshot(self.scratch_bundle(scratch, prepared.bundle), self.clone, "work")
        git(self.clone, "fetch", "-q", str(self.scratch_bundle(scratch, bundle)), "HEAD:honest")
        git(self.clone, "checkout", "-q", "honest")
        self.head_before = world.git("rev-parse", "HEAD").strip()

    @staticmethod
    def scratch_bundle(scratch: Path, data: bytes) -> Path:
        path = scratch / f"b{len(list(scratch.glob('b*')))}.bundle"
        path.write_bytes(data)
        return path

    def bundle(self, *revs: str) -> bytes:
        out = self.clone.parent / "forged.bundle"
        out.unlink(missing_ok=True)
        git(self.clone, "bundle", "create", "-q", str(out), *revs)
        return out.read_bytes()

    def commits(self, tip: str = "HEAD") -> list[str]:
        return git(self.clone, "rev-list", "--reverse", tip, f"^{self.base}").split()

    def settle(self, answer: JobAnswer, bundle: bytes | None) -> ReflectionOutcome:
        self.transfer.answers[answer.input_id] = (answer.model_dump_json().encode(), bundle)
        outcome = self.jobs.settle(self.request, self.prepared)
        assert outcome is not None
        return outcome

    def assert_nothing_merged(self, outcome: ReflectionOutcome, *absent: str) -> None:
        assert outcome.status == "failed", outcome
        assert self.world.git("rev-parse", "HEAD").strip() == self.head_before
        assert self.world.git("for-each-ref", "refs/heads/reflection/") == ""
        assert not list((self.world.reflections / "worktrees").glob("*"))
        assert watermark(self.world) is None
        assert "tabs" not in self.world.human()
        assert load_backoff(self.world.reflections).delay_s == 60  # it would come again
        for sha in absent:  # not even as a loose object
            found = subprocess.run(
                ["git", "-C", str(self.world.memory), "cat-file", "-e", sha], capture_output=True
            )
            assert found.returncode != 0, f"{sha} reached memory's object store"


@pytest.fixture
def forger(agentd_home: Path, clock: FakeClock, tmp_path: Path) -> Forger:
    return Forger(make_world(agentd_home, clock), tmp_path)


def test_the_honest_answer_merges(forger: Forger) -> None:
    """The forgeries below are refused for what they changed, not for being replayed."""
    outcome = forger.settle(forger.honest, forger.bundle("HEAD", f"^{forger.base}"))
    assert outcome.status == "merged"
    assert "- 我更喜欢用 tabs 缩进" in forger.world.human()


def test_an_answer_claiming_a_commit_memory_made_itself_is_refused(forger: Forger) -> None:
    """The agent edits memory after the job was sent; the forger bundles that commit (the
    agent's own work) as the reflection's: it would land re-signed as the reflector's."""
    memory = forger.world.memory
    (memory / "notes.md").write_text("---\ndescription: mine\n---\nthe agent wrote this\n")
    with MemoryRepo(memory) as repo:
        repo.commit_all("agent: notes", author_name="ada", author_email="ada@agentd.local")
    agents_own = forger.world.git("rev-parse", "HEAD").strip()
    forger.head_before = agents_own
    git(forger.clone, "fetch", "-q", str(memory), f"{agents_own}:refs/heads/stolen")
    stolen = forger.bundle("stolen", f"^{forger.base}")
    stolen = stolen.replace(b" refs/heads/stolen\n", b" HEAD\n", 1)
    answer = forger.honest.model_copy(update={"head": agents_own, "commits": [agents_own]})

    outcome = forger.settle(answer, stolen)

    assert outcome.reason == "invalid_answer"
    assert "memory already has" in outcome.message
    forger.assert_nothing_merged(outcome)


def test_an_answer_naming_commits_its_bundle_does_not_hold_is_refused(forger: Forger) -> None:
    extra = forger.world.git("rev-parse", "HEAD").strip()  # a commit it never made
    answer = forger.honest.model_copy(update={"commits": [*forger.honest.commits, extra]})

    outcome = forger.settle(answer, forger.bundle("HEAD", f"^{forger.base}"))

    assert outcome.reason == "invalid_answer"
    forger.assert_nothing_merged(outcome)


def test_a_bundle_with_an_extra_ref_is_refused(forger: Forger) -> None:
    git(forger.clone, "branch", "-f", "side", "HEAD")

    outcome = forger.settle(forger.honest, forger.bundle("HEAD", "side", f"^{forger.base}"))

    assert outcome.reason == "invalid_answer" and "refs/heads/side" in outcome.message
    forger.assert_nothing_merged(outcome)


def _other_agents_secret(tmp_path: Path) -> tuple[Path, str]:
    other = MemoryRepo.create(
        tmp_path / "other-agent" / "memory",
        agent_id="other",
        agent_name="other",
        persona="another agent",
        human="- the other user's bank PIN is 4921",
    )
    other.close()
    secret = git(other.path, "rev-parse", "HEAD:system/human.md")
    return other.path, secret


def test_a_bundle_carrying_another_agents_objects_is_refused_and_they_never_reach_memory(
    forger: Forger, tmp_path: Path
) -> None:
    other, secret = _other_agents_secret(tmp_path)
    git(forger.clone, "fetch", "-q", str(other), "HEAD:refs/other")
    git(forger.clone, "update-ref", "-d", "refs/other")  # the blob stays, reached by nothing
    ours = git(
        forger.clone, "rev-list", "--objects", "--no-object-names", "HEAD", f"^{forger.base}"
    )
    pack = subprocess.run(
        ["git", "-C", str(forger.clone), "pack-objects", "--stdout", "-q"],
        input=f"{ours}\n{secret}\n".encode(),
        capture_output=True,
        check=True,
    ).stdout
    header = f"# v2 git bundle\n-{forger.base} base\n{forger.honest.head} HEAD\n\n".encode()

    outcome = forger.settle(forger.honest, header + pack)

    assert outcome.reason == "invalid_answer" and "object(s)" in outcome.message
    forger.assert_nothing_merged(outcome, secret)


def test_commits_grafting_another_agents_history_in_are_refused(
    forger: Forger, tmp_path: Path
) -> None:
    other, secret = _other_agents_secret(tmp_path)
    git(forger.clone, "fetch", "-q", str(other), "HEAD:refs/heads/other")
    git(
        forger.clone,
        "-c", "user.name=x", "-c", "user.email=x@y",
        "merge", "-q", "--allow-unrelated-histories", "-s", "ours",
        "-m", "feat(reflection): more", "other",
    )  # fmt: skip
    answer = forger.honest.model_copy(
        update={"head": git(forger.clone, "rev-parse", "HEAD"), "commits": forger.commits()}
    )

    outcome = forger.settle(answer, forger.bundle("HEAD", f"^{forger.base}"))

    assert outcome.reason == "invalid_answer" and "another history" in outcome.message
    forger.assert_nothing_merged(outcome, secret)


def test_commits_built_on_another_commit_than_the_one_sent_are_refused(forger: Forger) -> None:
    """A bundle whose work needs another commit than the one the job was sent: it does not
    build on the memory the daemon knows this job started from."""
    last = forger.honest.commits[-1]
    (forger.clone / "later.md").write_text("---\ndescription: later\n---\nmore\n")
    git(forger.clone, "add", "-A")
    git(forger.clone, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-qm", "later")
    tip = git(forger.clone, "rev-parse", "HEAD")
    answer = forger.honest.model_copy(update={"head": tip, "commits": [tip]})

    outcome = forger.settle(answer, forger.bundle("HEAD", f"^{last}"))

    assert outcome.reason == "invalid_answer" and "do not build on" in outcome.message
    forger.assert_nothing_merged(outcome)


@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (lambda answer: answer.model_copy(update={"input_id": "rq-other-inputs"}), None),
        (lambda answer: answer, b"this is not a bundle at all"),
        (lambda answer: answer, b"# v2 git bundle\n" + b"f" * 40 + b" HEAD\n\nPACK\x00"),
    ],
)
def test_an_answer_for_other_inputs_or_a_damaged_bundle_is_refused(
    forger: Forger, forge: Callable[[JobAnswer], JobAnswer], reason: bytes | None
) -> None:
    answer = forge(forger.honest)
    bundle = reason if reason is not None else forger.bundle("HEAD", f"^{forger.base}")
    forger.transfer.answers[forger.prepared.ticket.input_id] = (
        answer.model_dump_json().encode(),
        bundle,
    )

    outcome = forger.jobs.settle(forger.request, forger.prepared)

    assert outcome is not None
    assert outcome.reason in ("invalid_answer", "bundle_corrupt"), outcome
    forger.assert_nothing_merged(outcome)
