"""MemoryRepo against real git repos under tmp_path."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from shared.errors import LockTimeout, MemoryBusy, MemoryPathError, MemoryRepoError
from shared.memory import frontmatter
from shared.memory.repo import (
    INITIAL_COMMIT_MESSAGE,
    MemoryRepo,
    validate_memory_path,
)
from shared.store.locks import file_lock
from tests.support.git_locks import live_git, plant_held_lock, plant_stale_lock
from tests.support.memory_lock import descriptors_on
from tests.support.waiting import ceiling, wait_until

AUTHOR = {"author_name": "Tester", "author_email": "tester@example.com"}


def git(repo: MemoryRepo, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo.path), *args], capture_output=True, text=True, check=check
    )
    return result.stdout.strip()


def write(repo: MemoryRepo, path: str, text: str) -> None:
    target = repo.path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "agent" / "memory",
        agent_id="agent-1",
        agent_name="Ada",
        persona="I am Ada, a careful assistant.",
        human="- Name: Sam\n- Likes tea",
    ) as created:
        yield created


def make_conflicting_merge(repo: MemoryRepo) -> None:
    git(repo, "checkout", "-q", "-b", "other")
    write(repo, "system/human.md", "from other\n")
    repo.commit_all("other side", **AUTHOR)
    git(repo, "checkout", "-q", "main")
    write(repo, "system/human.md", "from main\n")
    repo.commit_all("main side", **AUTHOR)
    git(repo, "merge", "other", check=False)
    assert (repo.path / ".git" / "MERGE_HEAD").exists()


def test_create_makes_one_initial_commit_with_persona_and_human(repo: MemoryRepo) -> None:
    [commit] = repo.log()
    assert commit.subject == INITIAL_COMMIT_MESSAGE
    assert (commit.author, commit.email) == ("Ada", "agent-1@agentd.local")
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "config", "gc.auto") == "0"
    assert git(repo, "config", "commit.gpgsign") == "false"
    files = repo.read_tree()
    assert list(files) == ["system/human.md", "system/persona.md"]
    meta, body = frontmatter.parse(files["system/persona.md"])
    assert meta == {"name": "persona", "description": "Who I am and how I behave."}
    assert body == "I am Ada, a careful assistant.\n"
    assert frontmatter.parse(files["system/human.md"])[0]["description"] == (
        "What I know about the user."
    )
    assert not repo.is_dirty()


def test_create_refuses_an_existing_repo(repo: MemoryRepo) -> None:
    with pytest.raises(MemoryRepoError, match="already holds a git repository"):
        MemoryRepo.create(repo.path, agent_id="a", agent_name="A", persona="p", human="h")


def test_opening_a_directory_without_git_fails(tmp_path: Path) -> None:
    with pytest.raises(MemoryRepoError, match="not a memory repository"):
        MemoryRepo(tmp_path)


def test_head_matches_rev_parse_after_commits_packed_refs_and_detach(repo: MemoryRepo) -> None:
    assert repo.head() == git(repo, "rev-parse", "HEAD")
    write(repo, "notes/a.md", "a\n")
    sha = repo.commit_all("add a", **AUTHOR)
    assert repo.head() == sha == git(repo, "rev-parse", "HEAD")
    git(repo, "pack-refs", "--all")
    assert not (repo.path / ".git" / "refs" / "heads" / "main").exists()
    assert repo.head() == sha
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    assert repo.head() == git(repo, "rev-parse", "HEAD") != sha


def test_commit_all_commits_with_the_author_and_returns_none_when_clean(
    repo: MemoryRepo,
) -> None:
    write(repo, "notes/x.md", "x\n")
    assert repo.is_dirty()
    sha = repo.commit_all("feat: add x", **AUTHOR)
    assert sha is not None and len(sha) == 40
    newest = repo.log(limit=1)[0]
    assert (newest.sha, newest.short_sha) == (sha, sha[:7])
    assert (newest.subject, newest.author, newest.email) == (
        "feat: add x",
        "Tester",
        AUTHOR["author_email"],
    )
    assert not repo.is_dirty()
    assert repo.commit_all("nothing", **AUTHOR) is None
    assert len(repo.log()) == 2


def test_commit_all_is_refused_during_a_merge(repo: MemoryRepo) -> None:
    make_conflicting_merge(repo)
    before = repo.head()
    with pytest.raises(MemoryRepoError, match="merge is in progress"):
        repo.commit_all("would seal conflict markers", **AUTHOR)
    assert repo.head() == before


def test_recover_aborts_a_leftover_merge(repo: MemoryRepo) -> None:
    make_conflicting_merge(repo)
    assert repo.recover() == ["aborted an unfinished merge"]
    assert not (repo.path / ".git" / "MERGE_HEAD").exists()
    assert (repo.path / "system/human.md").read_text() == "from main\n"
    assert not repo.is_dirty()
    assert repo.recover() == []


def leave_a_conflicted(repo: MemoryRepo, *command: str) -> str:
    """Stop ``git <command> <commit>`` on a conflict, as a daemon killed before aborting it
    leaves the checkout; returns HEAD from before it."""
    write(repo, "system/human.md", "- Likes coffee\n")
    coffee = repo.commit_all("coffee", **AUTHOR)
    write(repo, "system/human.md", "- Likes water\n")
    before = repo.commit_all("water", **AUTHOR)
    assert coffee is not None and before is not None
    git(repo, *command, coffee, check=False)
    assert "<<<<<<<" in (repo.path / "system/human.md").read_text()
    return before


@pytest.mark.parametrize(
    ("command", "operation"),
    [(("revert", "--no-commit"), "revert"), (("cherry-pick",), "cherry-pick")],
)
def test_a_conflicted_revert_or_cherry_pick_left_by_a_crash_is_never_committed(
    repo: MemoryRepo, command: tuple[str, ...], operation: str
) -> None:
    before = leave_a_conflicted(repo, *command)

    with pytest.raises(MemoryRepoError, match=f"{operation} is in progress.*{operation} --abort"):
        repo.commit_all("the next turn's edit", **AUTHOR)
    assert repo.head() == before

    assert repo.recover() == [f"aborted an unfinished {operation}"]
    assert repo.head() == before
    assert not repo.is_dirty()
    assert (repo.path / "system/human.md").read_text() == "- Likes water\n"
    assert repo.recover() == []
    write(repo, "notes/x.md", "x\n")
    assert repo.commit_all("the next turn's edit", **AUTHOR) is not None


def test_recover_removes_every_git_lock_a_crash_left_and_keeps_one_a_live_git_holds(
    repo: MemoryRepo,
) -> None:
    git_dir = repo.path / ".git"
    stale = ["index.lock", "HEAD.lock", "refs/heads/main.lock", "packed-refs.lock"]
    for name in stale:
        plant_stale_lock(git_dir / name)
    with live_git(repo.path), capture_logs() as logs:
        held = plant_held_lock(git_dir / "ORIG_HEAD.lock")
        done = repo.recover()

    assert sorted(done) == sorted(f"removed a stale .git/{name}" for name in stale)
    assert not any((git_dir / name).exists() for name in stale)
    assert held.exists()
    removed = [e["path"] for e in logs if e["event"] == "git_lock_removed"]
    assert sorted(removed) == sorted(str(git_dir / name) for name in stale)
    assert all(e["log_level"] == "warning" for e in logs if e["event"] == "git_lock_removed")


def test_a_commit_goes_past_a_stale_index_lock_after_removing_it(repo: MemoryRepo) -> None:
    lock = plant_stale_lock(repo.path / ".git" / "index.lock")
    write(repo, "notes/x.md", "x\n")

    with capture_logs() as logs:
        sha = repo.commit_all("feat: add x", **AUTHOR)

    assert sha is not None and repo.head() == sha
    assert not lock.exists()
    assert [e["path"] for e in logs if e["event"] == "git_lock_removed"] == [str(lock)]


def test_a_commit_blocked_by_a_live_gits_ref_lock_is_memory_busy_and_moves_nothing(
    repo: MemoryRepo,
) -> None:
    head = repo.head()
    write(repo, "notes/x.md", "x\n")
    with live_git(repo.path) as holder:
        lock = plant_held_lock(repo.path / ".git" / "refs" / "heads" / "main.lock")
        with pytest.raises(MemoryBusy) as raised:
            repo.commit_all("feat: add x", **AUTHOR)

    assert raised.value.code == "memory_busy"
    assert str(holder.pid) in raised.value.message and str(lock) in raised.value.message
    assert lock.exists()
    assert repo.head() == head
    assert (repo.path / "notes/x.md").read_text() == "x\n"


def test_edit_commits_under_the_lock_outside_the_repo(repo: MemoryRepo) -> None:
    async def main() -> None:
        async with repo.edit("feat: remember coffee", **AUTHOR):
            with pytest.raises(LockTimeout), file_lock(repo.lock_path, timeout_s=0):
                pass
            write(repo, "system/human.md", "- Likes coffee\n")

    asyncio.run(main())
    assert repo.log(limit=1)[0].subject == "feat: remember coffee"
    assert repo.lock_path == repo.path.parent / "memory.lock"
    assert repo.lock_path.exists()
    assert not repo.is_dirty()


def test_a_second_concurrent_edit_waits_for_the_first_commit(repo: MemoryRepo) -> None:
    events: list[str] = []
    inside = asyncio.Event()

    async def first() -> None:
        async with repo.edit("first", **AUTHOR):
            events.append("first in")
            inside.set()
            # the holder's descriptor and the second edit's, waiting for the lock
            await wait_until(lambda: descriptors_on(repo.lock_path) >= 2, "the second edit")
            write(repo, "notes/first.md", "1\n")
        events.append("first out")

    async def second() -> None:
        await inside.wait()
        async with repo.edit("second", **AUTHOR):
            events.append(f"second in, head is {repo.log(limit=1)[0].subject}")
            write(repo, "notes/second.md", "2\n")

    async def main() -> None:
        await asyncio.gather(first(), second())

    asyncio.run(main())
    assert events == ["first in", "first out", "second in, head is first"]
    assert [c.subject for c in repo.log()] == ["second", "first", INITIAL_COMMIT_MESSAGE]


def test_edit_that_raises_commits_nothing(repo: MemoryRepo) -> None:
    async def main() -> None:
        async with repo.edit("broken", **AUTHOR):
            write(repo, "notes/half.md", "half\n")
            raise RuntimeError("tool failed")

    with pytest.raises(RuntimeError):
        asyncio.run(main())
    assert len(repo.log()) == 1
    assert repo.is_dirty()


def test_a_cancelled_edit_keeps_the_lock_until_its_commit_finishes(
    repo: MemoryRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    committing = threading.Event()
    release = threading.Event()

    def slow_commit(*_args: object, **_kwargs: object) -> tuple[None, None]:
        committing.set()
        assert release.wait(ceiling(30)), "the test never let the commit finish"
        events.append("commit done")
        return None, None

    monkeypatch.setattr(repo, "_commit", slow_commit)

    async def editing() -> None:
        async with repo.edit("slow", **AUTHOR):
            pass

    async def main() -> None:
        task = asyncio.create_task(editing())
        await wait_until(committing.is_set, "the commit to start")
        task.cancel()
        for _ in range(10):  # the loop delivers the cancellation while the commit runs
            await asyncio.sleep(0)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        events.append("cancelled")

    asyncio.run(main())
    assert events == ["commit done", "cancelled"]


def test_read_tree_shows_committed_text_only(repo: MemoryRepo) -> None:
    write(repo, "notes/b.md", "committed\n")
    write(repo, "image.png", "not markdown")
    repo.commit_all("add b", **AUTHOR)
    write(repo, "notes/b.md", "dirty edit\n")
    write(repo, "notes/new.md", "untracked\n")
    files = repo.read_tree()
    assert list(files) == ["notes/b.md", "system/human.md", "system/persona.md"]
    assert files["notes/b.md"] == "committed\n"
    assert "image.png" not in files
    assert repo.read_tree("HEAD~1").keys() == {"system/human.md", "system/persona.md"}


def test_show_returns_committed_text(repo: MemoryRepo) -> None:
    text = repo.show("./system/human.md")
    assert text.endswith("- Name: Sam\n- Likes tea\n")
    assert text == repo.read_tree()["system/human.md"]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", ".git/config", "notes/../../x", ""])
def test_show_rejects_paths_outside_the_repo(repo: MemoryRepo, bad: str) -> None:
    with pytest.raises(MemoryPathError, match="not allowed"):
        repo.show(bad)


def test_show_names_a_missing_path_and_tells_a_bad_revision_apart(repo: MemoryRepo) -> None:
    with pytest.raises(MemoryPathError, match=r"'notes/missing\.md'.*`agentctl memory show`"):
        repo.show("notes/missing.md")
    with pytest.raises(MemoryRepoError, match="unknown revision"):
        repo.show("system/human.md", rev="no-such-branch")
    with pytest.raises(MemoryRepoError, match="invalid revision"):
        repo.show("system/human.md", rev="--output=/tmp/x")


def test_validate_memory_path_normalises() -> None:
    assert validate_memory_path("./notes//a.md") == "notes/a.md"


def test_changed_files_between_commits_and_from_an_unknown_commit(repo: MemoryRepo) -> None:
    old = repo.head()
    write(repo, "notes/x.md", "x\n")
    write(repo, "system/human.md", "- Name: Sam\n")
    new = repo.commit_all("change", **AUTHOR)
    assert new is not None
    assert repo.changed_files(old, new) == ["notes/x.md", "system/human.md"]
    assert repo.changed_files(new, new) == []
    assert repo.changed_files("0" * 40, new) == [
        "notes/x.md",
        "system/human.md",
        "system/persona.md",
    ]


def test_git_failures_become_memory_repo_errors_with_git_stderr(repo: MemoryRepo) -> None:
    with pytest.raises(MemoryRepoError, match="Not a valid object name") as caught:
        repo.read_tree("no-such-rev")
    assert caught.value.code == "memory_repo"
