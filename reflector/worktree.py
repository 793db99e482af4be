"""A reflection job's checkout: a private clone, its commits fetched back, merged, removed.

The sub-agent edits memory in its own checkout (``reflections/worktrees/<job_id>``, outside
the repo dir, on branch ``reflection/<job_id>``) so it never shares an index with the
daemon, which commits to ``main`` every turn. The checkout is a ``git clone --shared``,
not a linked worktree: a linked worktree shares its parent's ``.git`` (hooks, config,
refs), so a sub-agent able to commit could plant a hook that runs outside its sandbox or
move the parent's ``main`` (``../shared/spec/sandbox.md``). The clone has a git dir of its
own and borrows the parent's objects through ``objects/info/alternates``, which the
sandbox shows read-only. Its commits come back only through :func:`collect`: the harness
first puts the clone's git metadata back the way it made it (config, no hooks, no
``commondir``, its alternates), then fetches the clone's ``HEAD`` into the parent's
``reflection/<job_id>`` branch. Every git command here runs through
:mod:`shared.memory.git`, inert to hooks and config planted in either repo.

Only :func:`finalize` touches the parent checkout, following the safe merge-back protocol
of stack.md §5: a ``merge-tree`` dry run first, then, under the memory lock and only with
a clean parent and no git lock in the way, a fast-forward or a ``--no-ff`` merge that is
aborted at once if it fails. Leaving a conflicted merge behind is the one thing we must
never do: the daemon's next commit would seal the conflict markers into memory. The parent
checkout is never reset or cleaned: ``merge --abort`` is the only undo, so an edit the user
makes in it meanwhile survives. A git lock in the way is removed when a dead git left it
and is :class:`MemoryBusy` when a live git holds it (:mod:`shared.memory.git_locks`),
never a merge conflict. Jobs may run twice, so every step here is safe to repeat.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import MemoryRepoError
from shared.ids import validate_id
from shared.memory import git, git_locks
from shared.memory.repo import MemoryRepo
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

log = structlog.get_logger(__name__)

BRANCH_PREFIX = "reflection/"
SUBAGENT_NAME = "Reflection Subagent"
CLONE_CONFIG = """[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
[gc]
\tauto = 0
[user]
\tname = {name}
\temail = {email}
"""
"""The clone's whole config, written by the harness at creation and again before it reads
the clone: whatever the sub-agent wrote there (a filter driver, an fsmonitor, an include)
is gone before any harness git runs in it."""

MERGED_MESSAGE = "Merged {count} reflection commit(s)."
INTEGRATED_MESSAGE = "The primary agent integrated {count} reflection commit(s)."
NO_CHANGES_MESSAGE = "No memory changes were needed."

_CONVENTIONAL_PREFIX = re.compile(r"^\w+(?:\([^)]*\))?!?:\s*")
_FALLBACK_SUMMARY = "reflection memory updates"

FinalizeStatus = Literal[
    "merged", "no_changes", "failed", "parent_dirty", "merge_conflict", "dirty_uncommitted"
]
FailurePhase = Literal["reflection", "integration"]

_CLEANUP_OUTCOME: dict[FinalizeStatus, str] = {
    "parent_dirty": "parent_dirty",
    "merge_conflict": "merge_conflict",
    "dirty_uncommitted": "reflection_worktree_dirty",
    "failed": "subagent_failed",
}


@dataclass(frozen=True, slots=True)
class Worktree:
    """What :func:`finalize` needs to know about a job's checkout (a private clone)."""

    job_id: str
    path: Path
    branch: str
    """``reflection/<job_id>``: the clone's branch, and the parent's once :func:`collect`
    fetched it."""
    base_head: str
    """The parent HEAD the clone started from: commits after it are the job's work."""
    parent_dir: Path
    author_email: str

    @property
    def parent_objects(self) -> Path:
        """The parent's object store the clone borrows from; the sandbox shows it read-only."""
        return self.parent_dir / ".git" / "objects"


class FinalizeResult(BaseModel):
    """How a job ended for memory. Only consumed outcomes may advance the watermark."""

    model_config = ConfigDict(frozen=True)

    status: FinalizeStatus
    commit_count: int = 0
    failure_phase: FailurePhase | None = None
    """Set for ``failed`` only: ``reflection`` (the sub-agent) or ``integration`` (merging)."""
    message: str
    """For merged/no_changes the completion message; otherwise a short reason the caller
    wraps in its "will retry later" wording."""
    merged_head: str | None = None
    conflict_files: list[str] = Field(default_factory=list)

    @property
    def consumed(self) -> bool:
        """Whether the transcript slice counts as reflected (spec §4: merged, no_changes)."""
        return self.status in ("merged", "no_changes")


def create_worktree(
    parent_dir: Path,
    worktrees_dir: Path,
    job_id: str,
    *,
    author_email: str,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Worktree:
    """Clone the parent's HEAD to ``worktrees_dir/<job_id>`` on branch ``reflection/<job_id>``.

    A checkout or branch left by an earlier run of the same job (a redelivery) is removed
    first, so the job starts again from the current parent HEAD. The clone has no remote
    (nothing to push to) and no hooks; its commits are authored by the sub-agent
    (``author_email``). Holds the memory lock while it reads HEAD and removes leftovers.
    """
    validate_id(job_id, "reflection job id")
    worktrees_dir = worktrees_dir.absolute()
    if worktrees_dir.resolve().is_relative_to(parent_dir.resolve()):
        raise ValueError(
            f"{worktrees_dir} is inside the memory repo {parent_dir}; put worktrees beside "
            "it, or the parent would show them as untracked files"
        )
    path = worktrees_dir / job_id
    branch = BRANCH_PREFIX + job_id
    with MemoryRepo(parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        base_head = parent.head()
        if _force_remove(parent.path, path, branch):
            log.warning("reflection_worktree_recreated", job_id=job_id)
    worktree = Worktree(job_id, path, branch, base_head, parent.path, author_email)
    worktrees_dir.mkdir(parents=True, exist_ok=True)
    clone = ["clone", "--quiet", "--shared", "--no-checkout", "--template="]
    git.run(worktrees_dir, *clone, str(parent.path), str(path))
    _restore_metadata(worktree)
    git.run(path, "checkout", "--quiet", "-b", branch, base_head)
    log.info("reflection_worktree_created", job_id=job_id, base_head=base_head)
    return worktree


def collect(worktree: Worktree, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> bool:
    """Fetch the clone's ``HEAD`` into the parent as ``reflection/<job_id>``; False if the
    clone cannot be trusted (its git dir was replaced) or is gone.

    Safe to repeat: the branch is force-updated to whatever the clone holds now. Under the
    memory lock, since it writes the parent's objects and refs.
    """
    with MemoryRepo(worktree.parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        return _collect(parent, worktree) is None


def finalize(
    worktree: Worktree,
    *,
    should_merge: bool,
    require_already_merged: bool = False,
    failure_summary: str | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> FinalizeResult:
    """Decide the job's outcome, merge if it earned it, and remove the checkout and branch.

    The first matching row of spec §4 wins (rows 0 ``knownNoChanges`` and 5 "refresh from
    origin" do not exist here: callers always know the worktree, and memory has no origin):

    0'. the clone's ``.git`` is no longer the directory we made → ``failed``/reflection,
       nothing read from it;
    1. uncommitted changes in the checkout → ``dirty_uncommitted`` (checked before
       ``should_merge``, so a failed sub-agent that left edits ends here too);
    2. ``should_merge`` false (the sub-agent failed) → ``failed``/reflection;
    2'. its ``HEAD`` cannot be fetched into ``reflection/<job_id>`` → ``failed``/reflection;
    3. no commits since ``base_head`` → ``no_changes``;
    4. parent checkout dirty → ``parent_dirty`` (its files are left alone);
    6. ``require_already_merged`` and the branch is not in the parent's history →
       ``failed``/integration; 6'. it is → ``merged``;
    7. the merge would conflict or fails → ``merge_conflict``, parent unchanged;
    7'. a live git holds a lock the merge needs → :class:`MemoryBusy` raised, nothing
       merged (a lock left by a dead git is removed first);
    8. otherwise fast-forward (parent unmoved) or merge commit → ``merged``.

    Repeating is safe. A branch already in the parent's history (a run that merged, then
    died before cleanup) is reported ``merged`` without merging again. A missing checkout
    whose branch survives is judged like ``require_already_merged``: nothing can be
    checked there, so nothing unverified is merged. If both are gone (a second finalize)
    the result is ``failed``/integration "already finalized": not consumed, because the
    first outcome is unknown and consuming is irreversible, while a retry is harmless.

    Consumed outcomes clean up gently (``branch -d``), the others by force; the checkout is
    always deleted. Everything happens under the memory lock; :class:`LockTimeout` or a git error
    propagates with nothing reported, and :func:`sweep_orphans` clears what is left.
    """
    with MemoryRepo(worktree.parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        result = _decide(
            parent,
            worktree,
            should_merge=should_merge,
            require_already_merged=require_already_merged,
            failure_summary=failure_summary,
        )
        _cleanup(parent.path, worktree, gently=result.consumed)
    _log_outcome(worktree, result)
    return result


def sweep_orphans(
    parent_dir: Path,
    worktrees_dir: Path,
    live_job_ids: set[str],
    *,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> list[str]:
    """Undo what killed jobs left behind; returns what was done, for the log.

    Aborts a merge left in the parent (MERGE_HEAD) and removes git lock files no live git
    holds (:meth:`MemoryRepo.recover`), then removes every reflection checkout and
    ``reflection/*`` branch whose job id is not in ``live_job_ids``. Orphans are never
    merged: their job's transcript was not consumed and will be reflected again.
    """
    worktrees_dir = worktrees_dir.absolute()
    with MemoryRepo(parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        done = parent.recover()
        for entry in _dir_entries(worktrees_dir):
            if entry.name not in live_job_ids:
                _purge(entry)
                done.append(f"removed leftover checkout {entry.name}")
        # Linked worktrees of agentd before private clones: their dirs are gone now.
        _git(parent.path, "worktree", "prune")
        for branch in _reflection_branches(parent.path):
            if branch.removeprefix(BRANCH_PREFIX) not in live_job_ids:
                _git(parent.path, "branch", "-D", branch)
                done.append(f"deleted branch {branch}")
    for action in done:
        log.warning("reflection_orphan_swept", path=str(parent_dir), action=action)
    return done


# --- finalize -------------------------------------------------------------------------


def _decide(
    parent: MemoryRepo,
    worktree: Worktree,
    *,
    should_merge: bool,
    require_already_merged: bool,
    failure_summary: str | None,
) -> FinalizeResult:
    """The outcome row of spec §4 that applies; merges on the last row."""
    missing = not worktree.path.exists()
    if missing:
        if not _branch_exists(parent.path, worktree.branch):
            return _failed(
                "integration",
                f"nothing to finalize: job {worktree.job_id} has no checkout or branch left "
                "(already finalized?)",
            )
    else:
        untrusted = _untrusted(worktree)
        if untrusted is not None:
            return _failed("reflection", untrusted)
        _restore_metadata(worktree)
        if _has_uncommitted_changes(worktree.path):
            return FinalizeResult(
                status="dirty_uncommitted",
                message="the reflection's memory changes were not committed cleanly",
            )
    if not should_merge:
        return _failed("reflection", failure_summary or "the reflection did not complete cleanly")
    if not missing and (problem := _collect(parent, worktree)) is not None:
        return _failed("reflection", problem)
    if not should_merge:
        return _failed("reflection", failure_summary or "the reflection did not complete cleanly")
    count = _commit_count(parent.path, worktree)
    if count == 0:
        return FinalizeResult(status="no_changes", message=NO_CHANGES_MESSAGE)
    if parent.is_dirty():
        return FinalizeResult(
            status="parent_dirty",
            commit_count=count,
            message="the parent memory repo had uncommitted changes",
        )
    if _is_ancestor(parent.path, worktree.branch, "HEAD"):
        template = INTEGRATED_MESSAGE if require_already_merged else MERGED_MESSAGE
        return _merged(parent, count, template)
    if require_already_merged or missing:
        default = (
            "the reflection checkout disappeared and its branch did not merge"
            if missing
            else "the primary agent did not merge the reflection branch"
        )
        return _failed("integration", failure_summary or default, count)
    return _merge(parent, worktree, count)


def _merge(parent: MemoryRepo, worktree: Worktree, count: int) -> FinalizeResult:
    """Rows 7 and 8: dry-run the merge, then merge for real; never leave a merge behind.

    The merge itself is not run again after a lock failure: it may have stopped halfway.
    """
    predicted = _predicted_conflicts(parent.path, worktree.branch)
    if predicted:
        return _conflict(count, predicted, "")
    parent.ensure_unlocked()
    if _is_ancestor(parent.path, "HEAD", worktree.branch):
        args = ["merge", "--ff-only", worktree.branch]
    else:
        message = f"merge(reflection): {_merge_summary(parent.path, worktree.branch)}"
        args = ["merge", "--no-ff", "--no-edit", "-m", message, worktree.branch]
    try:
        proc = git.run_once(parent.path, *args)
    except MemoryRepoError:
        _abort_merge(parent)
        raise
    if proc.returncode == 0:
        return _merged(parent, count, MERGED_MESSAGE)
    files = _unmerged_files(parent.path)
    _abort_merge(parent)
    lock = git_locks.blocking_lock(proc.stderr)
    if lock is not None:
        raise git_locks.busy(lock)
    return _conflict(count, files, git.first_line(proc.stderr or proc.stdout))


def _predicted_conflicts(parent_dir: Path, branch: str) -> list[str]:
    """Files the merge would conflict on, from a dry run that touches no checkout."""
    proc = _git(
        parent_dir, "merge-tree", "--write-tree", "--name-only", "HEAD", branch, check=False
    )
    if proc.returncode == 0:
        return []
    if proc.returncode != 1:
        raise MemoryRepoError(
            f"git merge-tree failed in {parent_dir}: {git.first_line(proc.stderr)}"
        )
    names = proc.stdout.split("\n\n", 1)[0].splitlines()[1:]
    return list(dict.fromkeys(name for name in names if name))


def _abort_merge(parent: MemoryRepo) -> None:
    """Undo a failed merge with ``merge --abort``, the one undo that keeps others' edits.

    Never ``reset --hard``: the checkout was clean under the memory lock, but the user may
    have edited a file since, and their edit must survive. A merge that failed without
    recording ``MERGE_HEAD`` either changed nothing (git refused to start) or met a lock a
    live git took meanwhile; whatever it left shows as uncommitted changes for the user to
    commit or discard, rather than being reverted over their edits.
    """
    if (parent.path / ".git" / "MERGE_HEAD").exists():
        _git(parent.path, "merge", "--abort")
        log.warning("reflection_merge_aborted", path=str(parent.path))


def _merge_summary(parent_dir: Path, branch: str) -> str:
    """The last branch commit's subject without its ``type(scope)!:`` prefix."""
    subject = _git(parent_dir, "log", "-1", "--format=%s", branch).stdout.strip()
    return _CONVENTIONAL_PREFIX.sub("", subject, count=1).strip() or _FALLBACK_SUMMARY


def _merged(parent: MemoryRepo, count: int, template: str) -> FinalizeResult:
    return FinalizeResult(
        status="merged",
        commit_count=count,
        message=template.format(count=count),
        merged_head=parent.head(),
    )


def _failed(phase: FailurePhase, reason: str, count: int = 0) -> FinalizeResult:
    return FinalizeResult(status="failed", failure_phase=phase, commit_count=count, message=reason)


def _conflict(count: int, files: list[str], detail: str) -> FinalizeResult:
    where = f" in {', '.join(files)}" if files else f" ({detail})" if detail else ""
    return FinalizeResult(
        status="merge_conflict",
        commit_count=count,
        conflict_files=files,
        message=f"the reflection's memory updates conflicted with newer changes{where}",
    )


def _cleanup(parent_dir: Path, worktree: Worktree, *, gently: bool) -> None:
    """Remove the job's checkout and branch; "gently" refuses to drop unmerged work.

    A refusal after a consumed outcome means the work is already in the parent (or there
    was none), so it is logged and the removal forced: leftovers would only block a rerun.
    """
    _purge(worktree.path)
    if not _branch_exists(parent_dir, worktree.branch):
        return
    if gently and _git(parent_dir, "branch", "-d", worktree.branch, check=False).returncode == 0:
        return
    if gently:
        log.warning("reflection_cleanup_forced", job_id=worktree.job_id)
    _git(parent_dir, "branch", "-D", worktree.branch)


def _force_remove(parent_dir: Path, path: Path, branch: str) -> bool:
    """Remove checkout ``path`` and ``branch`` whatever their state; True if any existed."""
    existed = path.exists() or path.is_symlink()
    _purge(path)
    if _branch_exists(parent_dir, branch):
        _git(parent_dir, "branch", "-D", branch)
        existed = True
    return existed


# --- the clone's git dir -----------------------------------------------------------------


def _collect(parent: MemoryRepo, worktree: Worktree) -> str | None:
    """Fetch the clone's ``HEAD`` into ``reflection/<job_id>``; why not, or None if done."""
    untrusted = _untrusted(worktree)
    if untrusted is not None:
        return untrusted
    _restore_metadata(worktree)
    target = f"+HEAD:refs/heads/{worktree.branch}"
    fetched = _git(
        parent.path,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        str(worktree.path),
        target,
        check=False,
    )
    if fetched.returncode != 0:
        return f"the reflection's commits could not be fetched: {git.first_line(fetched.stderr)}"
    return None


def _untrusted(worktree: Worktree) -> str | None:
    """Why the clone's git dir cannot be read safely, or None. The sub-agent may replace
    ``.git`` by a link or a ``gitdir:`` file pointing at another repo (the parent's, another
    agent's): git would follow it outside the sandbox."""
    git_dir = worktree.path / ".git"
    if worktree.path.is_symlink() or git_dir.is_symlink() or not git_dir.is_dir():
        return "the reflection replaced its checkout's .git; nothing was taken from it"
    return None


def _restore_metadata(worktree: Worktree) -> None:
    """Put the clone's git dir back as the harness made it, before any harness git runs in
    it or fetches from it: our config, no hooks, no ``commondir``, no ``info/`` rules, and
    alternates naming only the parent's objects."""
    git_dir = worktree.path / ".git"
    for name in ("hooks", "info", "commondir", "config.worktree", "worktrees", "shallow"):
        _purge(git_dir / name)
    (git_dir / "config").unlink(missing_ok=True)
    config = CLONE_CONFIG.format(name=SUBAGENT_NAME, email=worktree.author_email)
    (git_dir / "config").write_text(config, encoding="utf-8")
    alternates = git_dir / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.unlink(missing_ok=True)
    alternates.write_text(f"{worktree.parent_objects}\n", encoding="utf-8")


def _log_outcome(worktree: Worktree, result: FinalizeResult) -> None:
    fields = {"job_id": worktree.job_id, "commit_count": result.commit_count}
    log.info("reflection_finalized", status=result.status, detail=result.message, **fields)
    if not result.consumed:
        log.info("reflection_worktree_cleanup", outcome=_CLEANUP_OUTCOME[result.status], **fields)


# --- git ------------------------------------------------------------------------------


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return git.run(cwd, *args, check=check)


def _has_uncommitted_changes(path: Path) -> bool:
    return bool(_git(path, "status", "--porcelain").stdout.strip())


def _commit_count(parent_dir: Path, worktree: Worktree) -> int:
    revs = f"{worktree.base_head}..{worktree.branch}"
    return int(_git(parent_dir, "rev-list", "--count", revs).stdout.strip())


def _is_ancestor(parent_dir: Path, ancestor: str, descendant: str) -> bool:
    proc = _git(parent_dir, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if proc.returncode not in (0, 1):
        raise MemoryRepoError(
            f"git merge-base failed in {parent_dir}: {git.first_line(proc.stderr)}"
        )
    return proc.returncode == 0


def _branch_exists(parent_dir: Path, branch: str) -> bool:
    ref = f"refs/heads/{branch}"
    return _git(parent_dir, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0


def _reflection_branches(parent_dir: Path) -> list[str]:
    refs = _git(parent_dir, "for-each-ref", "--format=%(refname)", "refs/heads/reflection/")
    return [ref.removeprefix("refs/heads/") for ref in refs.stdout.split()]


def _unmerged_files(parent_dir: Path) -> list[str]:
    proc = _git(parent_dir, "diff", "--name-only", "--diff-filter=U", check=False)
    return sorted(set(proc.stdout.split("\n")) - {""})


def _dir_entries(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.is_dir() else []


def _purge(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
