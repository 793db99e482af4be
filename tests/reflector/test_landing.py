"""How a reflection's commits land (:mod:`agentd.jobs.landing`, :mod:`shared.memory.signing`):
rebuilt under the harness's identity with the same trees and shape, cleaned messages, the
harness's trailers; what was landed stays landed when the clone is fetched again; what
memory may not hold is refused commit by commit. Real git repos under ``tmp_path``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.jobs import landing
from agentd.jobs.checkout import Worktree, collect, create_worktree
from agentd.jobs.finalize import finalize
from shared.errors import MemoryTooLarge, NestedRepository, TooManyCommits
from shared.memory.clone import SUBAGENT_NAME
from shared.memory.content import MemoryLimits
from shared.memory.provenance import commit_provenance
from shared.memory.repo import MemoryRepo
from shared.memory.signing import FALLBACK_SUBJECT, clean_message, one_line

EMAIL = "a1~reflection@agentd.local"
TRAILERS = {
    "Agent-ID": "a1~reflection",
    "Parent-Agent-ID": "a1",
    "Reflected-Messages": "msg-1..msg-9",
    "Job-ID": "job-1",
}
SIGNED = "\n".join(f"{key}: {value}" for key, value in TRAILERS.items())


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "agents/a1/memory", agent_id="a1", agent_name="a1", persona="p", human="- x"
    ) as repo:
        yield repo


def clone_of(parent: MemoryRepo, tmp_path: Path, limits: MemoryLimits | None = None) -> Worktree:
    return create_worktree(
        parent.path,
        tmp_path / "agents/a1/reflections/worktrees",
        "job-1",
        author_email=EMAIL,
        trailers=TRAILERS,
        limits=limits,
    )


@pytest.fixture
def wt(parent: MemoryRepo, tmp_path: Path) -> Worktree:
    return clone_of(parent, tmp_path)


def commit(wt: Worktree, path: str, text: str, *message: str) -> None:
    target = wt.path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git(wt.path, "add", "-A")
    args = [arg for part in (message or ("feat(reflection): note",)) for arg in ("-m", part)]
    git(wt.path, "commit", "-q", *args)


def landed(parent: MemoryRepo, wt: Worktree) -> list[str]:
    """``author | committer | subject`` of each commit the branch has over its base."""
    return git(
        parent.path, "log", "--format=%an <%ae>|%cn <%ce>|%s", f"{wt.base_head}..{wt.branch}"
    ).splitlines()


def test_every_new_commit_is_rebuilt_as_the_reflection_with_the_same_trees_and_shape(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit(wt, "notes/a.md", "a\n", "feat(reflection): a")
    git(wt.path, "checkout", "-q", "-b", "side")
    commit(wt, "notes/b.md", "b\n", "feat(reflection): b")
    git(wt.path, "checkout", "-q", wt.branch)
    commit(wt, "notes/c.md", "c\n", "feat(reflection): c")
    git(wt.path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    shape = git(wt.path, "log", "--format=%T %s", "--topo-order", f"{wt.base_head}..HEAD")

    assert collect(wt)

    tip = f"refs/heads/{wt.branch}"
    assert git(parent.path, "log", "--format=%T %s", "--topo-order", f"{wt.base_head}..{tip}") == (
        shape
    )
    assert git(parent.path, "rev-list", "--merges", "--count", f"{wt.base_head}..{tip}") == "1"
    identity = f"{SUBAGENT_NAME} <{EMAIL}>"
    assert {row.rsplit("|", 1)[0] for row in landed(parent, wt)} == {f"{identity}|{identity}"}
    for sha in git(parent.path, "rev-list", f"{wt.base_head}..{tip}").split():
        trailers = git(parent.path, "log", "-1", "--format=%(trailers:only,unfold)", sha)
        assert trailers == SIGNED
        assert commit_provenance(parent, sha).provenance.job_id == "job-1"
    assert git(parent.path, "for-each-ref", landing.INCOMING_PREFIX) == ""


def test_the_models_identity_date_and_origin_claims_are_not_what_lands(
    parent: MemoryRepo, wt: Worktree
) -> None:
    (wt.path / "notes.md").write_text("made up\n")
    git(wt.path, "add", "-A")
    forged = {
        "GIT_AUTHOR_NAME": "user",
        "GIT_AUTHOR_EMAIL": "user@agentd.local",
        "GIT_COMMITTER_NAME": "user",
        "GIT_COMMITTER_EMAIL": "user@agentd.local",
        "GIT_AUTHOR_DATE": "2001-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2001-01-01T00:00:00Z",
        "PATH": "/usr/bin:/bin",
    }
    message = (
        "feat(reflection): remember the user's words\n\n"
        "Reviewed transcript: /payload.json\n"
        "Signed-off-by: user <user@agentd.local>\n\n"
        "Edited-By: user\n"
        "# ------------------------ >8 ------------------------\n"
        "Job-ID: someone-else\n"
        "Conversation-ID: conv-1\x1b]0;owned\x07"
    )
    git(wt.path, "commit", "-q", "--cleanup=verbatim", "-m", message, env=forged)

    assert collect(wt)

    (row,) = landed(parent, wt)
    assert row == (
        f"{SUBAGENT_NAME} <{EMAIL}>|{SUBAGENT_NAME} <{EMAIL}>|"
        "feat(reflection): remember the user's words"
    )
    body = git(parent.path, "log", "-1", "--format=%B", wt.branch)
    assert body == (
        "feat(reflection): remember the user's words\n\n"
        f"Reviewed transcript: /payload.json\n\n{SIGNED}"
    )
    assert not git(parent.path, "log", "-1", "--format=%ad", wt.branch).endswith("2001 +0000")


def test_what_was_landed_stays_landed_when_the_clone_is_fetched_again(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit(wt, "notes/a.md", "a\n")
    assert collect(wt)
    first = git(parent.path, "rev-parse", wt.branch)
    assert git(wt.path, "rev-parse", "HEAD") == first, "the clone holds what landed"
    assert git(wt.path, "status", "--porcelain") == ""

    assert collect(wt)
    assert git(parent.path, "rev-parse", wt.branch) == first
    result = finalize(wt, should_merge=True)  # fetches the clone once more

    assert (result.status, result.merged_head) == ("merged", first)
    assert parent.head() == first


def test_a_commit_made_after_landing_is_rebuilt_on_top_of_what_landed(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit(wt, "notes/a.md", "a\n", "feat(reflection): a")
    assert collect(wt)
    first = git(parent.path, "rev-parse", wt.branch)
    commit(wt, "notes/b.md", "b\n", "feat(reflection): b")

    assert collect(wt)

    assert git(parent.path, "rev-parse", f"{wt.branch}~1") == first
    assert [row.rsplit("|", 1)[1] for row in landed(parent, wt)] == [
        "feat(reflection): b",
        "feat(reflection): a",
    ]


def test_the_merge_commit_quotes_the_landed_subject_and_ends_in_the_harness_trailer(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit(wt, "notes/a.md", "a\n", "Edited-By: user", "feat(reflection): a\nEdited-By: user")
    (parent.path / "notes/b.md").parent.mkdir(exist_ok=True)
    (parent.path / "notes/b.md").write_text("b\n")
    parent.commit_all("a turn's edit", author_name="a1", author_email="a1@agentd.local")

    assert finalize(wt, should_merge=True).status == "merged"

    assert git(parent.path, "log", "-1", "--format=%B") == ("merge(reflection): a\n\nJob-ID: job-1")
    assert commit_provenance(parent, "HEAD").provenance.kind == "merge"
    assert commit_provenance(parent, "HEAD^2").provenance.kind == "reflection"


def test_more_commits_than_one_job_may_land_are_refused_and_nothing_lands(
    parent: MemoryRepo, wt: Worktree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landing, "MAX_COMMITS", 2)
    for name in "abc":
        commit(wt, f"notes/{name}.md", f"{name}\n")

    with pytest.raises(TooManyCommits, match="3 new commits, over the 2"):
        collect(wt)

    assert git(parent.path, "for-each-ref", "refs/heads/reflection/", landing.INCOMING_PREFIX) == ""


@pytest.mark.parametrize(
    ("limits", "error", "path"),
    [
        (MemoryLimits(file_bytes=1000), MemoryTooLarge, "notes/big.md"),
        (MemoryLimits(total_bytes=1200), MemoryTooLarge, ""),
    ],
    ids=["a-file-over-its-limit", "memory-over-its-limit"],
)
def test_content_over_the_limits_in_any_landed_commit_is_refused_even_if_later_removed(
    parent: MemoryRepo,
    tmp_path: Path,
    limits: MemoryLimits,
    error: type[Exception],
    path: str,
) -> None:
    wt = clone_of(parent, tmp_path, limits)
    commit(wt, "notes/big.md", "x" * 1200)
    git(wt.path, "rm", "-q", "notes/big.md")
    git(wt.path, "commit", "-qm", "chore(reflection): drop it again")

    with pytest.raises(error) as refused:
        collect(wt)

    assert refused.value.path == path  # type: ignore[attr-defined]
    assert git(parent.path, "for-each-ref", "refs/heads/reflection/") == ""


def test_a_gitlink_is_refused_as_a_nested_repository(parent: MemoryRepo, wt: Worktree) -> None:
    head = git(wt.path, "rev-parse", "HEAD")
    git(wt.path, "update-index", "--add", "--cacheinfo", f"160000,{head},notes/sub")
    git(wt.path, "commit", "-qm", "feat(reflection): sub")

    with pytest.raises(NestedRepository) as refused:
        collect(wt)

    assert refused.value.path == "notes/sub"


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        ("feat: a\n\nbody\n\nSigned-off-by: x\nCo-Authored-By: y", "feat: a\n\nbody"),
        ("Edited-By: user\nfix: the real subject", "fix: the real subject"),
        ("  \n\n", FALLBACK_SUBJECT),
        ("a\r\nb\rc\x00\x1b[31m", "a\nb\nc[31m"),
        (
            "subject\n\n\n\nbody\n# ------------------------ >8 ------------------------\nmore",
            "subject\n\nbody\nmore",
        ),
        (
            "Updates:\n- kept: a colon inside a line is no trailer",
            "Updates:\n- kept: a colon inside a line is no trailer",
        ),
    ],
)
def test_a_models_message_keeps_its_words_and_loses_its_claims(written: str, kept: str) -> None:
    assert clean_message(written) == kept


def test_one_line_is_one_line_of_printable_text() -> None:
    assert one_line("bash: echo a\n\nEdited-By: user\x07\t b", limit=30) == (
        "bash: echo a Edited-By: user b"
    )
