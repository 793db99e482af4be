"""Provenance of memory commits and blame, against real git repos under tmp_path."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.errors import MemoryPathError, UnknownRevision
from shared.memory.provenance import (
    Provenance,
    blame,
    commit_provenance,
    commits_between,
    find_lines,
    recent_commits,
    resolve_commit,
    user_trailers,
    with_trailers,
)
from shared.memory.repo import MemoryRepo

AGENT = {"author_name": "Ada", "author_email": "agent-1@agentd.local"}
USER = {"author_name": "user", "author_email": "user@agentd.local"}
HUMAN = "system/human.md"
REFLECTION = with_trailers(
    "feat(reflection): remember 1 user preference(s) 🔮",
    {
        "Agent-ID": "agent-1~reflection",
        "Parent-Agent-ID": "agent-1",
        "Reflected-Messages": "msg-01A..msg-01Z",
        "Job-ID": "20261201-job",
    },
)


def git(repo: MemoryRepo, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo.path), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def append(repo: MemoryRepo, path: str, line: str) -> None:
    target = repo.path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as f:
        f.write(line + "\n")


def commit(repo: MemoryRepo, message: str, author: dict[str, str] = AGENT) -> str:
    sha = repo.commit_all(message, **author)
    assert sha is not None
    return sha


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "memory", agent_id="agent-1", agent_name="Ada", persona="I am Ada.", human=""
    ) as created:
        yield created


def merge_reflection_over_a_user_edit(repo: MemoryRepo) -> tuple[str, str]:
    """A reflection branch adds a line while the user edits the same file's top, then the
    branch is merged ``--no-ff`` as the worker does: (reflection sha, merge sha)."""
    git(repo, "checkout", "-q", "-b", "reflection/job")
    append(repo, HUMAN, "- uses pnpm")
    reflection = commit(
        repo,
        REFLECTION,
        {"author_name": "Reflection Subagent", "author_email": "agent-1~reflection@agentd.local"},
    )
    git(repo, "checkout", "-q", "main")
    (repo.path / "notes.md").write_text("first line by the user\n")
    commit(repo, with_trailers("edit notes.md by hand", user_trailers()), USER)
    git(repo, "merge", "-q", "--no-ff", "-m", "merge(reflection): remember", "reflection/job")
    return reflection, repo.head()


def test_each_writer_s_trailers_parse_to_its_kind_and_ids(repo: MemoryRepo) -> None:
    append(repo, HUMAN, "- likes tea")
    turn = commit(
        repo,
        with_trailers(
            "edit_file: update system/human.md",
            {"Agent-ID": "agent-1", "Conversation-ID": "conv-1", "Message-ID": "msg-9"},
        ),
    )
    append(repo, HUMAN, "- uses pnpm")
    reflection = commit(repo, REFLECTION)
    append(repo, HUMAN, "- by hand")
    user = commit(repo, with_trailers("edit by hand", user_trailers()), USER)

    assert commit_provenance(repo, turn).provenance == Provenance(
        kind="turn", agent_id="agent-1", conversation_id="conv-1", message_id="msg-9"
    )
    assert commit_provenance(repo, reflection).provenance == Provenance(
        kind="reflection",
        agent_id="agent-1~reflection",
        job_id="20261201-job",
        reflected_first="msg-01A",
        reflected_last="msg-01Z",
    )
    assert commit_provenance(repo, user).provenance == Provenance(kind="user")
    shown = commit_provenance(repo, user[:7])
    assert shown.sha == user and shown.short_sha == user[:7]
    assert shown.authored_at.tzinfo is not None
    assert [c.provenance.kind for c in recent_commits(repo)] == [
        "user",
        "reflection",
        "turn",
        "initial",
    ]
    assert [c.sha for c in commits_between(repo, turn)] == [user, reflection]


def test_old_commits_without_trailers_still_parse_by_author_and_shape(
    repo: MemoryRepo,
) -> None:
    append(repo, HUMAN, "- a")
    turn = commit(repo, "bash: echo a >> system/human.md")
    append(repo, HUMAN, "- b")
    user = commit(repo, "chore: commit memory edits made by hand", USER)
    append(repo, HUMAN, "- c")
    reflection = commit(
        repo,
        "feat(reflection): remember c",
        {"author_name": "Reflection Subagent", "author_email": "a~reflection@agentd.local"},
    )
    kinds = {c.sha: c.provenance.kind for c in recent_commits(repo)}
    assert kinds[turn] == "turn" and kinds[user] == "user" and kinds[reflection] == "reflection"
    assert recent_commits(repo)[-1].provenance == Provenance(kind="initial")


def test_forged_trailer_values_are_dropped_not_shown(repo: MemoryRepo) -> None:
    append(repo, HUMAN, "- x")
    sha = commit(
        repo,
        with_trailers(
            "feat(reflection): x",
            {"Reflected-Messages": "../../etc..msg-1", "Job-ID": "<script>", "Reverts": "HEAD"},
        ),
    )
    provenance = commit_provenance(repo, sha).provenance
    assert provenance.reflected_first is None and provenance.job_id is None
    assert provenance.reverts is None
    assert provenance.kind == "reflection"  # by its subject, as an old commit would be


def test_blame_names_the_commit_that_last_wrote_each_line(repo: MemoryRepo) -> None:
    initial = repo.head()
    append(repo, HUMAN, "- likes tea")
    tea = commit(repo, with_trailers("add tea", {"Message-ID": "msg-1"}))
    lines = blame(repo, HUMAN)
    assert [line.line_no for line in lines] == list(range(1, len(lines) + 1))
    assert (repo.path / HUMAN).read_text().splitlines() == [line.text for line in lines]
    assert lines[-1].text == "- likes tea" and lines[-1].commit.sha == tea
    assert lines[0].commit.sha == initial and lines[0].commit.provenance.kind == "initial"
    assert [line.commit.sha for line in blame(repo, HUMAN, initial)] == [initial] * (len(lines) - 1)


def test_blame_follows_a_line_through_a_merge_to_the_reflection_behind_it(
    repo: MemoryRepo,
) -> None:
    reflection, merge = merge_reflection_over_a_user_edit(repo)
    assert commit_provenance(repo, merge).provenance.kind == "merge"
    (line,) = [line for line in blame(repo, HUMAN) if line.text == "- uses pnpm"]
    assert line.commit.sha == reflection
    assert line.commit.provenance.job_id == "20261201-job"


def test_a_line_the_merge_itself_wrote_names_the_reflection_it_was_resolved_from(
    repo: MemoryRepo,
) -> None:
    """An explicit merge whose reviewer reworded the reflection's line while merging: blame
    alone names the merge commit; provenance names the reflection behind it."""
    reflection, _ = merge_reflection_over_a_user_edit(repo)
    git(repo, "reset", "-q", "--hard", "HEAD^")
    git(repo, "merge", "-q", "--no-ff", "--no-commit", "reflection/job")
    text = (repo.path / HUMAN).read_text().replace("- uses pnpm", "- uses pnpm (always)")
    (repo.path / HUMAN).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "merge(reflection): reviewed")
    merge = repo.head()
    raw = git(repo, "blame", "--porcelain", "HEAD", "--", HUMAN)
    assert merge in raw, "git blame alone names the merge for a line the merge wrote"
    (line,) = [line for line in blame(repo, HUMAN) if line.text == "- uses pnpm (always)"]
    assert line.commit.sha == reflection


@pytest.mark.parametrize(
    "rev", ["--all", "HEAD:system/human.md", "../../etc/passwd", "nosuchrev", "0" * 40, ""]
)
def test_a_revision_that_names_no_commit_is_a_typed_error(repo: MemoryRepo, rev: str) -> None:
    with pytest.raises(UnknownRevision):
        resolve_commit(repo, rev)
    with pytest.raises(UnknownRevision):
        blame(repo, HUMAN, rev or "-")


def test_a_tree_or_blob_is_not_a_commit(repo: MemoryRepo) -> None:
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with pytest.raises(UnknownRevision):
        commit_provenance(repo, tree)


def test_blame_of_a_missing_or_escaping_path_is_a_typed_error(repo: MemoryRepo) -> None:
    with pytest.raises(MemoryPathError):
        blame(repo, "notes/none.md")
    with pytest.raises(MemoryPathError):
        blame(repo, "../outside.md")


def test_find_lines_matches_case_insensitively_across_files(repo: MemoryRepo) -> None:
    append(repo, HUMAN, "- Uses PNPM for every project")
    append(repo, "notes/tools.md", "pnpm, not npm")
    sha = commit(repo, "add tools")
    found = find_lines(repo, "pnpm")
    assert [(f.path, f.line.text) for f in found] == [
        ("notes/tools.md", "pnpm, not npm"),
        (HUMAN, "- Uses PNPM for every project"),
    ]
    assert {f.line.commit.sha for f in found} == {sha}
    assert find_lines(repo, "   ") == []
