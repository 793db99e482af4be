"""Reverting one memory commit as the user, against real git repos under tmp_path."""

from __future__ import annotations

import pytest

from shared.errors import MemoryConflict, RevertConflict, UnknownRevision
from shared.memory.provenance import blame, commit_provenance
from shared.memory.repo import MemoryRepo
from shared.memory.revert import revert
from tests.memory.test_provenance import (
    HUMAN,
    USER,
    append,
    commit,
    git,
    merge_reflection_over_a_user_edit,
)
from tests.memory.test_provenance import repo as repo


def state(repo: MemoryRepo) -> tuple[str, str, str]:
    """HEAD, ``git status`` and the human file: what a refused revert must leave alone."""
    return repo.head(), git(repo, "status", "--porcelain"), (repo.path / HUMAN).read_text()


def test_reverting_a_merged_reflection_removes_its_line_as_the_user(repo: MemoryRepo) -> None:
    reflection, merge = merge_reflection_over_a_user_edit(repo)

    done = revert(repo, reflection[:7])

    assert done.reverted.sha == reflection and done.commit is not None
    assert "- uses pnpm" not in (repo.path / HUMAN).read_text()
    assert (repo.path / "notes.md").exists(), "the user's edit merged alongside stays"
    assert done.commit.author == "user" and done.commit.parents == [merge]
    assert done.commit.provenance.kind == "user"
    assert done.commit.provenance.reverts == reflection
    assert done.commit.subject == 'Revert "feat(reflection): remember 1 user preference(s) 🔮"'
    assert git(repo, "status", "--porcelain") == ""


def test_reverting_the_merge_commit_undoes_what_it_brought_in(repo: MemoryRepo) -> None:
    _, merge = merge_reflection_over_a_user_edit(repo)
    revert(repo, merge)
    assert "- uses pnpm" not in (repo.path / HUMAN).read_text()
    assert (repo.path / "notes.md").exists()


def test_a_revert_that_conflicts_is_refused_and_changes_nothing(repo: MemoryRepo) -> None:
    reflection, _ = merge_reflection_over_a_user_edit(repo)
    text = (repo.path / HUMAN).read_text().replace("- uses pnpm", "- uses pnpm, never npm")
    (repo.path / HUMAN).write_text(text)
    commit(repo, "edit by hand", USER)
    before = state(repo)

    with pytest.raises(RevertConflict, match=f"{reflection[:7]}.*{HUMAN}"):
        revert(repo, reflection)

    assert state(repo) == before
    assert not (repo.path / ".git" / "REVERT_HEAD").exists()
    assert blame(repo, HUMAN)[-1].commit.provenance.kind == "user"


def test_uncommitted_changes_refuse_the_revert_before_it_runs(repo: MemoryRepo) -> None:
    append(repo, HUMAN, "- likes tea")
    tea = commit(repo, "add tea")
    append(repo, "notes.md", "half-written")
    before = state(repo)
    with pytest.raises(MemoryConflict, match=r"uncommitted changes \(notes.md\)"):
        revert(repo, tea)
    assert state(repo) == before


def test_a_commit_outside_memory_s_history_is_not_reverted(repo: MemoryRepo) -> None:
    git(repo, "checkout", "-q", "-b", "elsewhere")
    append(repo, HUMAN, "- elsewhere")
    other = commit(repo, "elsewhere")
    git(repo, "checkout", "-q", "main")
    before = state(repo)
    with pytest.raises(UnknownRevision, match="not in this agent's memory history"):
        revert(repo, other)
    with pytest.raises(UnknownRevision):
        revert(repo, "HEAD:system/human.md")
    assert state(repo) == before


def test_reverting_twice_has_nothing_left_to_undo(repo: MemoryRepo) -> None:
    append(repo, HUMAN, "- likes tea")
    tea = commit(repo, "add tea")
    first = revert(repo, tea)
    assert first.commit is not None
    assert commit_provenance(repo, "HEAD").provenance.reverts == tea
    before = state(repo)

    again = revert(repo, tea)

    assert again.commit is None
    assert state(repo) == before
    assert not (repo.path / ".git" / "REVERT_HEAD").exists()
