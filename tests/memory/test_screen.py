"""What a memory commit does with content memory may not hold (:mod:`shared.memory.screen`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.errors import MemoryTooLarge, NestedRepository
from shared.memory import git
from shared.memory.content import MemoryLimits
from shared.memory.repo import MemoryRepo

AGENT = {"author_name": "Ada", "author_email": "a1@agentd.local"}
USER = {"author_name": "user", "author_email": "user@agentd.local", "by": "user"}
LIMITS = MemoryLimits(file_bytes=1_000, total_bytes=4_000)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "memory", agent_id="a1", agent_name="Ada", persona="p", human="- x"
    ) as created:
        yield MemoryRepo(created.path, limits=LIMITS)


def committed(repo: MemoryRepo) -> dict[str, int]:
    listing = git.run(repo.path, "ls-tree", "-r", "-l", "HEAD").stdout
    return {line.split("\t")[1]: int(line.split()[3]) for line in listing.splitlines()}


def test_the_agents_nested_repository_is_deleted_and_the_rest_committed(
    repo: MemoryRepo,
) -> None:
    git.run(repo.path, "init", "-q", "notes/sub")
    (repo.path / "notes/sub/kept.md").write_text("plain file beside it\n")
    (repo.path / "other").mkdir()
    (repo.path / "other/.git").write_text("gitdir: /elsewhere\n")
    (repo.path / "notes/fine.md").write_text("fine\n")

    with pytest.raises(NestedRepository) as refused:
        repo.commit_all("bash: git init", **AGENT)

    assert refused.value.path == "notes/sub/.git"
    assert "also refused: other/.git" in refused.value.message
    assert "the rest of the change was committed" in refused.value.message
    assert not (repo.path / "notes/sub/.git").exists() and not (repo.path / "other/.git").exists()
    assert {"notes/fine.md", "notes/sub/kept.md"} <= committed(repo).keys()
    assert repo.uncommitted() == []


def test_the_agents_oversized_file_is_undone_a_grown_one_put_back_as_at_head(
    repo: MemoryRepo,
) -> None:
    (repo.path / "notes").mkdir()
    (repo.path / "notes/grown.md").write_text("small\n")
    repo.commit_all("small", **AGENT)
    (repo.path / "notes/grown.md").write_text("x" * 1_500)
    (repo.path / "notes/new.md").write_text("y" * 1_200)
    (repo.path / "notes/ok.md").write_text("ok\n")

    with pytest.raises(MemoryTooLarge) as refused:
        repo.commit_all("bash: grow", **AGENT)

    assert (refused.value.path, refused.value.rule) == ("notes/grown.md", "file_too_large")
    assert "1,500 bytes, over the 1,000-byte limit" in refused.value.message
    assert "notes/new.md" in refused.value.message
    assert (repo.path / "notes/grown.md").read_text() == "small\n"
    assert not (repo.path / "notes/new.md").exists()
    assert committed(repo)["notes/ok.md"] == 3 and "notes/new.md" not in committed(repo)
    assert repo.uncommitted() == []


def test_past_the_whole_limit_the_files_that_grew_most_are_put_back(repo: MemoryRepo) -> None:
    for name, size in (("a", 970), ("b", 980), ("c", 990), ("d", 960), ("e", 500)):
        (repo.path / f"{name}.md").write_text("z" * size)

    with pytest.raises(MemoryTooLarge) as refused:
        repo.commit_all("bash: fill", **AGENT)

    assert (refused.value.rule, refused.value.path) == ("memory_too_large", "")
    assert "over its 4,000-byte limit" in refused.value.message
    assert not (repo.path / "c.md").exists()
    assert {"a.md", "b.md", "d.md", "e.md"} <= committed(repo).keys()
    assert sum(committed(repo).values()) <= LIMITS.total_bytes


def test_what_a_user_committed_over_a_limit_stays_and_the_agent_still_commits(
    repo: MemoryRepo,
) -> None:
    (repo.path / "big.md").write_text("u" * 2_000)
    repo.commit_all("by hand", **USER)  # reported by status and doctor, not refused
    (repo.path / "big.md").write_text("v" * 2_000)  # the agent rewrites it, no larger
    (repo.path / "note.md").write_text("n\n")

    assert repo.commit_all("bash: edit", **AGENT) is not None
    assert committed(repo)["big.md"] == 2_000 and "note.md" in committed(repo)


def test_a_users_commit_is_refused_whole_while_a_nested_repository_is_there(
    repo: MemoryRepo,
) -> None:
    head = repo.head()
    git.run(repo.path, "init", "-q", "notes/mine")
    (repo.path / "notes/edited.md").write_text("by hand\n")

    with pytest.raises(NestedRepository, match="Nothing was committed"):
        repo.commit_all("by hand", **USER)

    assert repo.head() == head
    assert (repo.path / "notes/mine/.git").is_dir(), "the user's repository is left alone"
    assert (repo.path / "notes/edited.md").exists()
