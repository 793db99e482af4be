"""Reflection checkouts (private clones) against real git repos under tmp_path (spec §4, §5,
§7 items 22-28)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentd.jobs import finalize as finalize_module
from agentd.jobs.checkout import Worktree, collect, create_worktree, sweep_orphans
from agentd.jobs.finalize import NO_CHANGES_MESSAGE, finalize
from reflector.snapshot import parent_snapshot
from shared import sandbox
from shared.errors import InvalidId, MemoryBusy, MemoryRepoError
from shared.memory import frontmatter
from shared.memory.clone import SUBAGENT_NAME
from shared.memory.provenance import commit_provenance
from shared.memory.repo import MemoryRepo
from tests.support.git_locks import live_git, plant_held_lock, plant_stale_lock

EMAIL = "a1~reflection@agentd.local"
SUBJECT = "feat(reflection)!: remember the tea preference 🔮"
HUMAN = "system/human.md"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=check
    )
    return result.stdout.strip()


def write(root: Path, rel_path: str, text: str) -> None:
    target = root / rel_path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def commit_in(wt: Worktree, rel_path: str, text: str, subject: str = SUBJECT) -> None:
    """What the sub-agent does: edit, ``git add -A``, ``git commit`` in the worktree."""
    write(wt.path, rel_path, text)
    git(wt.path, "add", "-A")
    git(wt.path, "commit", "-q", "-m", subject)


def commit_in_parent(parent: MemoryRepo, rel_path: str, text: str) -> None:
    """What the daemon does meanwhile: a commit on main."""
    write(parent.path, rel_path, text)
    parent.commit_all("daemon edit", author_name="a1", author_email="a1@agentd.local")


def human_with(line: str) -> str:
    meta: frontmatter.Meta = {"name": "human", "description": "What I know about the user."}
    return frontmatter.render(meta, f"{line}\n")


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "agents/a1/memory",
        agent_id="a1",
        agent_name="a1",
        persona="p",
        human="- likes tea",
    ) as repo:
        yield repo


@pytest.fixture
def worktrees_dir(tmp_path: Path) -> Path:
    return tmp_path / "agents/a1/reflections/worktrees"


@pytest.fixture
def wt(parent: MemoryRepo, worktrees_dir: Path) -> Worktree:
    return create_worktree(parent.path, worktrees_dir, "job-1", author_email=EMAIL)


def reflection_branches(parent: MemoryRepo) -> list[str]:
    return git(parent.path, "for-each-ref", "--format=%(refname:short)", "refs/heads/reflection/")


def assert_cleaned_up(parent: MemoryRepo, wt: Worktree) -> None:
    assert not wt.path.exists()
    assert reflection_branches(parent) == ""
    assert git(parent.path, "worktree", "list", "--porcelain").count("worktree ") == 1


# --- create -----------------------------------------------------------------------------


def test_a_new_worktree_checks_out_parent_head_on_its_own_branch_outside_the_repo(
    parent: MemoryRepo, worktrees_dir: Path, wt: Worktree
) -> None:
    assert wt.path == worktrees_dir.absolute() / "job-1"
    assert wt.branch == "reflection/job-1"
    assert wt.base_head == parent.head()
    assert wt.parent_dir == parent.path
    assert git(wt.path, "rev-parse", "HEAD") == parent.head()
    assert (wt.path / HUMAN).read_text() == (parent.path / HUMAN).read_text()
    assert not parent.is_dirty()


def test_sub_agent_commits_carry_the_reflection_identity_and_the_parent_keeps_its_own(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    assert git(wt.path, "log", "-1", "--format=%an <%ae>") == f"{SUBAGENT_NAME} <{EMAIL}>"
    assert git(parent.path, "config", "user.name") == "a1"
    assert git(parent.path, "config", "user.email") == "a1@agentd.local"


def test_create_refuses_a_job_id_that_is_not_a_safe_name(
    parent: MemoryRepo, worktrees_dir: Path
) -> None:
    with pytest.raises(InvalidId):
        create_worktree(parent.path, worktrees_dir, "../escape", author_email=EMAIL)


def test_create_refuses_a_parent_without_a_commit(tmp_path: Path, worktrees_dir: Path) -> None:
    empty = tmp_path / "agents/a1/memory"
    empty.mkdir(parents=True)
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(MemoryRepoError, match="no commit"):
        create_worktree(empty, worktrees_dir, "job-1", author_email=EMAIL)
    assert not (worktrees_dir / "job-1").exists()


def test_create_refuses_a_worktrees_dir_inside_the_memory_repo(parent: MemoryRepo) -> None:
    with pytest.raises(ValueError, match="inside the memory repo"):
        create_worktree(parent.path, parent.path / "wt", "job-1", author_email=EMAIL)


def test_recreating_the_same_job_id_discards_the_earlier_attempt(
    parent: MemoryRepo, worktrees_dir: Path, wt: Worktree
) -> None:
    commit_in(wt, "stale.md", "from the first run\n")
    write(wt.path, "dirty.md", "uncommitted\n")
    commit_in_parent(parent, "newer.md", "newer\n")

    again = create_worktree(parent.path, worktrees_dir, "job-1", author_email=EMAIL)

    assert again.path == wt.path
    assert again.base_head == parent.head() != wt.base_head
    assert git(again.path, "rev-parse", "HEAD") == parent.head()
    assert not (again.path / "stale.md").exists()
    assert not (again.path / "dirty.md").exists()
    assert (again.path / "newer.md").exists()


# --- finalize: merges -------------------------------------------------------------------


def test_parent_change_to_another_file_merges_both_with_a_merge_commit(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    commit_in_parent(parent, "notes/daemon.md", "written by the daemon\n")

    result = finalize(wt, should_merge=True)

    assert result.status == "merged"
    assert result.consumed
    assert result.commit_count == 1
    assert result.message == "Merged 1 reflection commit(s)."
    assert result.merged_head == parent.head()
    assert "- likes green tea" in (parent.path / HUMAN).read_text()
    assert (parent.path / "notes/daemon.md").exists()
    assert not parent.is_dirty()
    assert git(parent.path, "log", "-1", "--format=%s") == (
        "merge(reflection): remember the tea preference 🔮"
    )
    assert len(git(parent.path, "log", "-1", "--format=%P").split()) == 2
    assert commit_provenance(parent, "HEAD").provenance.job_id == wt.job_id
    assert_cleaned_up(parent, wt)


def test_an_unmoved_parent_is_fast_forwarded_without_a_merge_commit(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "a.md", "a\n", subject="feat(reflection): a 🔮")
    commit_in(wt, "b.md", "b\n", subject="chore(reflection): b 🔮")
    tree = git(wt.path, "rev-parse", "HEAD^{tree}")

    result = finalize(wt, should_merge=True)

    assert (result.status, result.commit_count) == ("merged", 2)
    assert parent.head() == result.merged_head
    assert git(parent.path, "rev-parse", "HEAD^{tree}") == tree
    assert git(parent.path, "rev-parse", "HEAD~2") == wt.base_head
    assert len(git(parent.path, "log", "-1", "--format=%P").split()) == 1
    assert [c.subject for c in parent.log()][:2] == [
        "chore(reflection): b 🔮",
        "feat(reflection): a 🔮",
    ]
    assert not parent.is_dirty()
    assert_cleaned_up(parent, wt)


def test_the_same_line_changed_in_both_is_a_conflict_that_leaves_the_parent_untouched(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    commit_in_parent(parent, HUMAN, human_with("- likes coffee now"))
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert result.status == "merge_conflict"
    assert not result.consumed
    assert result.conflict_files == [HUMAN]
    assert "conflicted" in result.message
    assert parent.head() == head
    assert "- likes coffee now" in (parent.path / HUMAN).read_text()
    assert not parent.is_dirty()
    assert not (parent.path / ".git/MERGE_HEAD").exists()
    assert_cleaned_up(parent, wt)


def test_a_merge_that_fails_despite_the_dry_run_is_aborted_at_once(
    parent: MemoryRepo, wt: Worktree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulates main moving between the dry run and the merge."""
    monkeypatch.setattr(finalize_module, "_predicted_conflicts", lambda *_args: [])
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    commit_in_parent(parent, HUMAN, human_with("- likes coffee now"))
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.conflict_files) == ("merge_conflict", [HUMAN])
    assert parent.head() == head
    assert not parent.is_dirty()
    assert not (parent.path / ".git/MERGE_HEAD").exists()
    assert "<<<<<<<" not in (parent.path / HUMAN).read_text()
    assert_cleaned_up(parent, wt)


def test_a_failed_merge_is_only_aborted_and_an_edit_made_meanwhile_survives_byte_for_byte(
    parent: MemoryRepo, wt: Worktree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user saves a file just as the merge starts; the merge then conflicts.

    The checkout was clean when finalize looked; the edit came after. The old clean-up
    ran ``reset --hard`` and destroyed it."""
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    saved = tmp_path / "saved-by-the-user"
    saved.write_bytes("# my persona\r\n\tno trailing newline, ü —".encode())
    real_run_once = finalize_module.git.run_once

    def user_saves_then_merge(cwd: Path, *args: str, **kwargs: object) -> object:
        if args[0] == "merge":
            (parent.path / "system/persona.md").write_bytes(saved.read_bytes())
        return real_run_once(cwd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(finalize_module, "_predicted_conflicts", lambda *_args: [])
    monkeypatch.setattr(finalize_module.git, "run_once", user_saves_then_merge)
    commit_in_parent(parent, HUMAN, human_with("- likes coffee now"))
    head, human = parent.head(), (parent.path / HUMAN).read_bytes()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.consumed) == ("merge_conflict", False)
    assert (parent.path / "system/persona.md").read_bytes() == saved.read_bytes()
    assert (parent.path / HUMAN).read_bytes() == human
    assert parent.head() == head
    assert not (parent.path / ".git/MERGE_HEAD").exists()
    assert git(parent.path, "status", "--porcelain") == "M system/persona.md"


# --- finalize: git lock files ---------------------------------------------------------------


@pytest.mark.parametrize("parent_moved", [False, True], ids=["fast-forward", "merge-commit"])
def test_a_branch_lock_left_by_a_crash_is_removed_and_the_merge_goes_through(
    parent: MemoryRepo, wt: Worktree, parent_moved: bool
) -> None:
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    if parent_moved:
        commit_in_parent(parent, "notes/daemon.md", "written by the daemon\n")
    lock = plant_stale_lock(parent.path / ".git/refs/heads/main.lock")

    with capture_logs() as logs:
        result = finalize(wt, should_merge=True)

    assert result.status == "merged"
    assert "- likes green tea" in (parent.path / HUMAN).read_text()
    assert not lock.exists()
    assert not parent.is_dirty()
    [removed] = [e for e in logs if e["event"] == "git_lock_removed"]
    assert (removed["path"], removed["log_level"]) == (str(lock), "warning")
    assert_cleaned_up(parent, wt)


@pytest.mark.parametrize(
    ("lock_name", "parent_moved"),
    [
        ("refs/heads/main.lock", False),
        ("refs/heads/main.lock", True),
        ("index.lock", True),
        ("HEAD.lock", False),
    ],
)
def test_a_lock_a_live_git_holds_is_memory_busy_not_a_conflict_and_changes_nothing(
    parent: MemoryRepo, wt: Worktree, lock_name: str, parent_moved: bool
) -> None:
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    if parent_moved:
        commit_in_parent(parent, "notes/daemon.md", "written by the daemon\n")
    head, human = parent.head(), (parent.path / HUMAN).read_text()

    with live_git(parent.path):
        lock = plant_held_lock(parent.path / ".git" / lock_name)
        with pytest.raises(MemoryBusy) as raised:
            finalize(wt, should_merge=True)

    assert raised.value.code == "memory_busy"
    assert lock.exists()
    assert parent.head() == head
    assert (parent.path / HUMAN).read_text() == human
    assert git(parent.path, "status", "--porcelain") == ""
    assert wt.path.exists() and reflection_branches(parent) == wt.branch


# --- finalize: nothing merged -----------------------------------------------------------


def test_no_commits_is_no_changes_and_consumes(parent: MemoryRepo, wt: Worktree) -> None:
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.commit_count, result.consumed) == ("no_changes", 0, True)
    assert result.message == NO_CHANGES_MESSAGE
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


def test_a_dirty_parent_is_left_alone_and_nothing_is_consumed(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    write(parent.path, "user-edit.md", "the user is typing\n")
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.consumed) == ("parent_dirty", False)
    assert "uncommitted changes" in result.message
    assert (parent.path / "user-edit.md").read_text() == "the user is typing\n"
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


@pytest.mark.parametrize("should_merge", [True, False])
def test_uncommitted_edits_in_the_worktree_are_dirty_uncommitted_even_after_a_failure(
    parent: MemoryRepo, wt: Worktree, should_merge: bool
) -> None:
    commit_in(wt, "committed.md", "x\n")
    write(wt.path, "forgotten.md", "never committed\n")
    head = parent.head()

    result = finalize(wt, should_merge=should_merge)

    assert (result.status, result.consumed) == ("dirty_uncommitted", False)
    assert "not committed cleanly" in result.message
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


@pytest.mark.parametrize("with_commit", [True, False])
def test_a_failed_sub_agent_is_failed_in_the_reflection_phase_with_or_without_commits(
    parent: MemoryRepo, wt: Worktree, with_commit: bool
) -> None:
    if with_commit:
        commit_in(wt, "notes.md", "x\n")
    head = parent.head()

    result = finalize(wt, should_merge=False, failure_summary="the reflector ran out of steps")

    assert (result.status, result.failure_phase, result.consumed) == (
        "failed",
        "reflection",
        False,
    )
    assert result.message == "the reflector ran out of steps"
    assert parent.head() == head
    assert not (parent.path / "notes.md").exists()
    assert_cleaned_up(parent, wt)


# --- finalize: explicit integration and repeats -----------------------------------------


def test_require_already_merged_accepts_a_branch_the_primary_agent_merged(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    commit_in_parent(parent, "other.md", "y\n")
    assert collect(wt)
    git(parent.path, "merge", "-q", "--no-ff", "-m", "merge(reflection): by hand", wt.branch)
    head = parent.head()

    result = finalize(wt, should_merge=True, require_already_merged=True)

    assert (result.status, result.commit_count, result.consumed) == ("merged", 1, True)
    assert "integrated 1 reflection commit" in result.message
    assert parent.head() == head == result.merged_head
    assert_cleaned_up(parent, wt)


def test_require_already_merged_refuses_to_merge_a_branch_that_was_not_merged(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    assert collect(wt)  # as explicit mode does before the agent reviews
    head = parent.head()

    result = finalize(wt, should_merge=True, require_already_merged=True)

    assert (result.status, result.failure_phase, result.consumed) == (
        "failed",
        "integration",
        False,
    )
    assert "did not merge" in result.message
    assert parent.head() == head
    assert not (parent.path / "notes.md").exists()
    assert_cleaned_up(parent, wt)


def test_finalize_after_a_crash_between_merge_and_cleanup_does_not_merge_twice(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    commit_in_parent(parent, "other.md", "y\n")
    assert collect(wt)
    git(parent.path, "merge", "-q", "--no-ff", "-m", "merge(reflection): first run", wt.branch)
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.commit_count) == ("merged", 1)
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


def test_a_vanished_worktree_whose_branch_was_merged_counts_as_merged(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    assert collect(wt)
    git(parent.path, "merge", "-q", "--ff-only", wt.branch)
    shutil.rmtree(wt.path)

    result = finalize(wt, should_merge=True)

    assert (result.status, result.commit_count) == ("merged", 1)
    assert_cleaned_up(parent, wt)


def test_a_vanished_worktree_whose_branch_was_not_merged_is_not_merged_blindly(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    assert collect(wt)
    shutil.rmtree(wt.path)
    head = parent.head()

    result = finalize(wt, should_merge=True)

    assert (result.status, result.failure_phase) == ("failed", "integration")
    assert "did not merge" in result.message
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


def test_finalizing_twice_reports_already_finalized_without_consuming(
    parent: MemoryRepo, wt: Worktree
) -> None:
    commit_in(wt, "notes.md", "x\n")
    assert finalize(wt, should_merge=True).status == "merged"
    head = parent.head()

    again = finalize(wt, should_merge=True)

    assert (again.status, again.failure_phase, again.consumed) == ("failed", "integration", False)
    assert "already finalized" in again.message
    assert parent.head() == head
    assert_cleaned_up(parent, wt)


# --- sweep ------------------------------------------------------------------------------


def test_sweep_removes_every_checkout_branch_and_half_landed_ref_a_dead_daemon_left(
    parent: MemoryRepo, worktrees_dir: Path
) -> None:
    """Only the daemon settles reflections, one per agent at a time: when it starts, all
    that its clones left belongs to no live job."""
    dead = create_worktree(parent.path, worktrees_dir, "dead", author_email=EMAIL)
    commit_in(dead, "notes.md", "x\n")
    assert collect(dead)
    write(dead.path, "half-written.md", "killed mid-run\n")
    gone = create_worktree(parent.path, worktrees_dir, "gone", author_email=EMAIL)
    assert collect(gone)
    shutil.rmtree(gone.path)
    write(worktrees_dir, "stray/file.md", "not a worktree\n")
    git(parent.path, "update-ref", "refs/reflection-incoming/dead", parent.head())
    head = parent.head()

    done = sweep_orphans(parent.path, worktrees_dir)

    assert {"removed leftover checkout dead", "removed leftover checkout stray"} <= set(done)
    assert {"deleted branch reflection/dead", "deleted branch reflection/gone"} <= set(done)
    assert "deleted refs/reflection-incoming/dead" in done
    assert list(worktrees_dir.iterdir()) == []
    assert reflection_branches(parent) == ""
    assert parent.head() == head
    assert sweep_orphans(parent.path, worktrees_dir) == []


def test_sweep_removes_what_a_killed_sandboxed_command_left(
    parent: MemoryRepo, worktrees_dir: Path
) -> None:
    """overlayfs's work directory beside a checkout (its ``work`` inside is mode 000)."""
    create_worktree(parent.path, worktrees_dir, "dead", author_email=EMAIL)
    scratch = sandbox.scratch_dir(worktrees_dir / "dead")
    (scratch / "work").mkdir(parents=True)
    (scratch / "work").chmod(0)

    sweep_orphans(parent.path, worktrees_dir)

    assert list(worktrees_dir.iterdir()) == []


def test_the_clone_holds_its_one_commit_itself_and_names_no_other_repo(
    parent: MemoryRepo, worktrees_dir: Path
) -> None:
    """No ``objects/info/alternates`` (it named the parent's object store by its host path,
    which the sandbox then had to show); the parent's history stays out of the clone."""
    commit_in_parent(parent, "notes.md", "older\n")
    commit_in_parent(parent, "notes.md", "newer\n")
    wt = create_worktree(parent.path, worktrees_dir, "job-1", author_email=EMAIL)
    git_dir = wt.path / ".git"

    assert not (git_dir / "objects" / "info" / "alternates").exists()
    assert (git_dir / "shallow").read_text() == f"{wt.base_head}\n"
    assert git(wt.path, "rev-list", "--count", "HEAD") == "1"
    assert git(wt.path, "show", "HEAD:notes.md") == "newer"
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    assert collect(wt)
    assert git(parent.path, "rev-list", "--count", f"{wt.base_head}..{wt.branch}") == "1"
    assert not (parent.path / ".git" / "shallow").exists()


def test_a_shallow_file_made_a_link_is_replaced_not_written_through(
    parent: MemoryRepo, wt: Worktree
) -> None:
    """The sub-agent may link ``.git/shallow`` to the parent's: rewriting it must not make
    the parent's history end at the clone's commit."""
    shallow = wt.path / ".git" / "shallow"
    shallow.unlink()
    shallow.symlink_to(parent.path / ".git" / "shallow")
    commit_in(wt, HUMAN, human_with("- likes green tea"))

    assert collect(wt)
    assert not (parent.path / ".git" / "shallow").exists()
    assert not shallow.is_symlink() and shallow.read_text() == f"{wt.base_head}\n"


def test_sweep_aborts_a_merge_left_in_the_parent(parent: MemoryRepo, worktrees_dir: Path) -> None:
    wt = create_worktree(parent.path, worktrees_dir, "dead", author_email=EMAIL)
    commit_in(wt, HUMAN, human_with("- likes green tea"))
    commit_in_parent(parent, HUMAN, human_with("- likes coffee now"))
    assert collect(wt)
    git(parent.path, "merge", wt.branch, check=False)
    assert (parent.path / ".git/MERGE_HEAD").exists()

    done = sweep_orphans(parent.path, worktrees_dir)

    assert "aborted an unfinished merge" in done
    assert not (parent.path / ".git/MERGE_HEAD").exists()
    assert not parent.is_dirty()
    assert "- likes coffee now" in (parent.path / HUMAN).read_text()
    assert_cleaned_up(parent, wt)


# --- snapshot ---------------------------------------------------------------------------


def note(description: str, body: str) -> str:
    return frontmatter.render({"description": description}, body)


def test_snapshot_lists_the_tree_and_inlines_only_system_files(
    parent: MemoryRepo, wt: Worktree
) -> None:
    write(wt.path, "reference/tea.md", note("Tea varieties the user likes", "SECRET_BODY\n"))
    write(wt.path, "skills/brew/SKILL.md", note("Brewing skill", "SKILL_BODY\n"))
    write(wt.path, ".tmp/scratch.md", "hidden\n")

    snapshot = parent_snapshot(wt.path)

    assert snapshot.startswith("<parent_memory>\n<memory_filesystem>\n$MEMORY_DIR/\n")
    assert snapshot.endswith("</parent_memory>")
    tree = snapshot.split("</memory_filesystem>")[0]
    assert tree.index("reference/") < tree.index("skills/") < tree.index("system/")
    assert "tea.md (Tea varieties the user likes)" in tree
    assert "SKILL.md (Brewing skill)" in tree
    assert "human.md\n" in tree
    assert "What I know about the user" not in tree
    assert "<path>$MEMORY_DIR/system/human.md</path>" in snapshot
    assert "<path>$MEMORY_DIR/system/persona.md</path>" in snapshot
    assert "- likes tea" in snapshot
    assert "SECRET_BODY" not in snapshot and "SKILL_BODY" not in snapshot
    assert "scratch" not in snapshot and ".tmp" not in snapshot
    assert str(wt.path) not in snapshot and str(parent.path) not in snapshot


def test_snapshot_caps_entries_per_directory(wt: Worktree) -> None:
    for index in range(10):
        write(wt.path, f"user/note{index}.md", note(f"note {index}", "x\n"))

    snapshot = parent_snapshot(wt.path, max_children_per_dir=3)

    assert "note2.md (note 2)" in snapshot
    assert "note3.md" not in snapshot
    assert "└── … (7 more entries)" in snapshot


def test_snapshot_truncates_a_huge_system_file_within_the_limit(wt: Worktree) -> None:
    write(wt.path, "system/large.md", "START\n" + "x" * 60_000 + "\nEND_SHOULD_BE_TRUNCATED\n")
    write(wt.path, "system/zz-after.md", "after the large file\n")

    snapshot = parent_snapshot(wt.path)

    assert len(snapshot) <= 40_000
    assert "<path>$MEMORY_DIR/system/large.md</path>\nSTART" in snapshot
    assert "Memory preview truncated" in snapshot
    assert "Full file at $MEMORY_DIR/system/large.md" in snapshot
    assert "END_SHOULD_BE_TRUNCATED" not in snapshot
    assert "Memory preview omitted 2 more system file(s)" in snapshot  # persona, zz-after
    assert snapshot.endswith("</parent_memory>")


def test_snapshot_counts_system_files_that_do_not_fit_at_all(wt: Worktree) -> None:
    for index in range(40):
        write(wt.path, f"system/f{index:02}.md", "y" * 100 + "\n")

    snapshot = parent_snapshot(wt.path, limit=1_000)

    assert len(snapshot) <= 1_000
    assert "[Tree truncated: showing" in snapshot
    assert "more system file(s)" in snapshot
    assert snapshot.endswith("</parent_memory>")
