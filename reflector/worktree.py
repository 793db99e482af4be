"""A reflection job's git worktree: create it, merge it back into memory, clean up after it.

The sub-agent edits memory in its own worktree (``reflections/worktrees/<job_id>``, outside
the repo dir, on branch ``reflection/<job_id>``) so it never shares an index with the
daemon, which commits to ``main`` every turn. Only :func:`finalize` touches the parent
checkout, following the safe merge-back protocol of stack.md §5: a ``merge-tree`` dry run
first, then, under the memory lock and only with a clean parent and no git lock in the
way, a fast-forward or a ``--no-ff`` merge that is aborted at once if it fails. Leaving a
conflicted merge behind is the one thing we must never do: the daemon's next commit would
seal the conflict markers into memory. The parent checkout is never reset or cleaned:
``merge --abort`` is the only undo, so an edit the user makes in it meanwhile survives.

Git runs through a small subprocess helper rather than GitPython: it gives the return code
and stderr directly, and each call gets a timeout (stack.md §5 measured both and
recommends this). A git lock file in the way is removed and the command run again when
the git that left it is dead, and is :class:`MemoryBusy` when a live git holds it
(:mod:`shared.memory.git_locks`), never a merge conflict. Jobs may run twice, so every
step here is safe to repeat.
"""

from __future__ import annotations

import os
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
from shared.memory import git_locks
from shared.memory.repo import MemoryRepo
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

log = structlog.get_logger(__name__)

BRANCH_PREFIX = "reflection/"
SUBAGENT_NAME = "Reflection Subagent"
GIT_TIMEOUT_S = 30.0

MERGED_MESSAGE = "Merged {count} reflection commit(s)."
INTEGRATED_MESSAGE = "The primary agent integrated {count} reflection commit(s)."
NO_CHANGES_MESSAGE = "No memory changes were needed."

_CONVENTIONAL_PREFIX = re.compile(r"^\w+(?:\([^)]*\))?!?:\s*")
_FALLBACK_SUMMARY = "reflection memory updates"
_SCRUBBED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")

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
    """What :func:`finalize` needs to know about a job's worktree."""

    job_id: str
    path: Path
    branch: str
    base_head: str
    """The parent HEAD the worktree started from: commits after it are the job's work."""
    parent_dir: Path


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
    """Check out the parent's HEAD at ``worktrees_dir/<job_id>`` on ``reflection/<job_id>``.

    A worktree or branch left by an earlier run of the same job (a redelivery) is removed
    first, so the job starts again from the current parent HEAD. Commits in the worktree
    are authored by the sub-agent (``author_email``); the identity lives in the worktree's
    own config, because a plain ``git config`` there would rewrite the parent's.
    Holds the memory lock: worktree bookkeeping shares the parent's ``.git``.
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
        if _force_remove(parent.path, path, branch, purge_dir=True):
            log.warning("reflection_worktree_recreated", job_id=job_id)
        worktrees_dir.mkdir(parents=True, exist_ok=True)
        _git(parent.path, "worktree", "add", "--quiet", "-b", branch, str(path), base_head)
        _configure_identity(parent.path, path, author_email)
        worktree = Worktree(job_id, path, branch, base_head, parent.path)
    log.info("reflection_worktree_created", job_id=job_id, base_head=base_head)
    return worktree


def finalize(
    worktree: Worktree,
    *,
    should_merge: bool,
    require_already_merged: bool = False,
    failure_summary: str | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> FinalizeResult:
    """Decide the job's outcome, merge if it earned it, and remove the worktree and branch.

    The first matching row of spec §4 wins (rows 0 ``knownNoChanges`` and 5 "refresh from
    origin" do not exist here: callers always know the worktree, and memory has no origin):

    1. uncommitted changes in the worktree → ``dirty_uncommitted`` (checked before
       ``should_merge``, so a failed sub-agent that left edits ends here too);
    2. ``should_merge`` false (the sub-agent failed) → ``failed``/reflection;
    3. no commits since ``base_head`` → ``no_changes``;
    4. parent checkout dirty → ``parent_dirty`` (its files are left alone);
    6. ``require_already_merged`` and the branch is not in the parent's history →
       ``failed``/integration; 6'. it is → ``merged``;
    7. the merge would conflict or fails → ``merge_conflict``, parent unchanged;
    7'. a live git holds a lock the merge needs → :class:`MemoryBusy` raised, nothing
       merged (a lock left by a dead git is removed first);
    8. otherwise fast-forward (parent unmoved) or merge commit → ``merged``.

    Repeating is safe. A branch already in the parent's history (a run that merged, then
    died before cleanup) is reported ``merged`` without merging again. A missing worktree
    dir whose branch survives is judged like ``require_already_merged``: nothing can be
    checked there, so nothing unverified is merged. If both are gone (a second finalize)
    the result is ``failed``/integration "already finalized": not consumed, because the
    first outcome is unknown and consuming is irreversible, while a retry is harmless.

    Consumed outcomes clean up gently (``worktree remove``, ``branch -d``), the others by
    force. Everything happens under the memory lock; :class:`LockTimeout` or a git error
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
    holds (:meth:`MemoryRepo.recover`), prunes worktrees whose dir vanished, then force-removes
    every reflection worktree, worktree dir and ``reflection/*`` branch whose job id is not
    in ``live_job_ids``. Orphans are never merged: their job's transcript was not consumed
    and will be reflected again.
    """
    worktrees_dir = worktrees_dir.absolute()
    with MemoryRepo(parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        done = parent.recover()
        _git(parent.path, "worktree", "prune")
        for path, branch in _registered_worktrees(parent.path):
            job_id = _job_id_of(path, branch, worktrees_dir)
            if job_id is not None and job_id not in live_job_ids:
                _git(parent.path, "worktree", "remove", "--force", "--force", str(path))
                done.append(f"removed worktree {path.name}")
        for entry in _dir_entries(worktrees_dir):
            if entry.name not in live_job_ids:
                _purge(entry)
                done.append(f"removed leftover directory {entry.name}")
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
        _git(parent.path, "worktree", "prune")
        if not _branch_exists(parent.path, worktree.branch):
            return _failed(
                "integration",
                f"nothing to finalize: job {worktree.job_id} has no worktree or branch left "
                "(already finalized?)",
            )
    elif _has_uncommitted_changes(worktree.path):
        return FinalizeResult(
            status="dirty_uncommitted",
            message="the reflection's memory changes were not committed cleanly",
        )
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
            "the reflection worktree disappeared and its branch did not merge"
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
        proc = _run_git(parent.path, *args)
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
    return _conflict(count, files, _first_line(proc.stderr or proc.stdout))


def _predicted_conflicts(parent_dir: Path, branch: str) -> list[str]:
    """Files the merge would conflict on, from a dry run that touches no checkout."""
    proc = _git(
        parent_dir, "merge-tree", "--write-tree", "--name-only", "HEAD", branch, check=False
    )
    if proc.returncode == 0:
        return []
    if proc.returncode != 1:
        raise MemoryRepoError(f"git merge-tree failed in {parent_dir}: {_first_line(proc.stderr)}")
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
    """Remove the job's worktree and branch; "gently" refuses to drop unmerged work.

    A refusal after a consumed outcome means the work is already in the parent (or there
    was none), so it is logged and the removal forced: leftovers would only block a rerun.
    """
    if gently and _remove_gently(parent_dir, worktree):
        return
    if gently:
        log.warning("reflection_cleanup_forced", job_id=worktree.job_id)
    _force_remove(parent_dir, worktree.path, worktree.branch, purge_dir=False)


def _remove_gently(parent_dir: Path, worktree: Worktree) -> bool:
    if worktree.path.exists():
        removed = _git(parent_dir, "worktree", "remove", str(worktree.path), check=False)
        if removed.returncode != 0:
            return False
    _git(parent_dir, "worktree", "prune")
    if not _branch_exists(parent_dir, worktree.branch):
        return True
    return _git(parent_dir, "branch", "-d", worktree.branch, check=False).returncode == 0


def _force_remove(parent_dir: Path, path: Path, branch: str, *, purge_dir: bool) -> bool:
    """Remove worktree ``path`` and ``branch`` whatever their state; True if any existed.

    ``purge_dir`` also deletes a dir git does not know as a worktree; only for paths we
    computed inside our own worktrees dir.
    """
    existed = path.exists()
    if existed:
        _git(parent_dir, "worktree", "remove", "--force", "--force", str(path), check=False)
    if purge_dir and path.exists():
        _purge(path)
    if path.exists():
        log.warning("reflection_worktree_left", path=str(path), hint="sweep_orphans removes it")
    _git(parent_dir, "worktree", "prune")
    if _branch_exists(parent_dir, branch):
        _git(parent_dir, "branch", "-D", branch)
        existed = True
    return existed


def _log_outcome(worktree: Worktree, result: FinalizeResult) -> None:
    fields = {"job_id": worktree.job_id, "commit_count": result.commit_count}
    log.info("reflection_finalized", status=result.status, detail=result.message, **fields)
    if not result.consumed:
        log.info("reflection_worktree_cleanup", outcome=_CLEANUP_OUTCOME[result.status], **fields)


# --- git ------------------------------------------------------------------------------


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``git -C cwd args`` past a stale git lock (removed, then run again).

    A lock a live git holds raises :class:`MemoryBusy` even with ``check=False``, so no
    caller mistakes it for the command's own answer (a merge conflict, a missing branch).
    """
    removed: set[Path] = set()
    while True:
        proc = _run_git(cwd, *args)
        lock = git_locks.blocking_lock(proc.stderr) if proc.returncode != 0 else None
        if lock is None:
            break
        git_locks.settle(lock, removed)
    if check and proc.returncode != 0:
        detail = _first_line(proc.stderr) or f"exit code {proc.returncode}"
        raise MemoryRepoError(f"git {args[0]} failed in {cwd}: {detail}")
    return proc


def _run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``git -C cwd args`` once: never prompts, never signs, gives up after 30 s."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env["GIT_TERMINAL_PROMPT"] = "0"
    command = ["git", "-c", "commit.gpgsign=false", "-c", "core.quotePath=false", "-C", str(cwd)]
    try:
        proc = subprocess.run(
            [*command, *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise MemoryRepoError(
            f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f} s in {cwd}"
        ) from exc
    return proc


def _configure_identity(parent_dir: Path, path: Path, author_email: str) -> None:
    """Give the worktree its own author; worktree-scoped config needs the extension on."""
    _git(parent_dir, "config", "extensions.worktreeConfig", "true")
    settings = {"user.name": SUBAGENT_NAME, "user.email": author_email, "commit.gpgsign": "false"}
    for key, value in settings.items():
        _git(path, "config", "--worktree", key, value)


def _has_uncommitted_changes(path: Path) -> bool:
    return bool(_git(path, "status", "--porcelain").stdout.strip())


def _commit_count(parent_dir: Path, worktree: Worktree) -> int:
    revs = f"{worktree.base_head}..{worktree.branch}"
    return int(_git(parent_dir, "rev-list", "--count", revs).stdout.strip())


def _is_ancestor(parent_dir: Path, ancestor: str, descendant: str) -> bool:
    proc = _git(parent_dir, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if proc.returncode not in (0, 1):
        raise MemoryRepoError(f"git merge-base failed in {parent_dir}: {_first_line(proc.stderr)}")
    return proc.returncode == 0


def _branch_exists(parent_dir: Path, branch: str) -> bool:
    ref = f"refs/heads/{branch}"
    return _git(parent_dir, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0


def _reflection_branches(parent_dir: Path) -> list[str]:
    refs = _git(parent_dir, "for-each-ref", "--format=%(refname)", "refs/heads/reflection/")
    return [ref.removeprefix("refs/heads/") for ref in refs.stdout.split()]


def _registered_worktrees(parent_dir: Path) -> list[tuple[Path, str | None]]:
    """(path, branch) of every linked worktree; the main checkout is listed first."""
    listing = _git(parent_dir, "worktree", "list", "--porcelain").stdout
    found: list[tuple[Path, str | None]] = []
    for block in listing.strip().split("\n\n")[1:]:
        fields = dict(line.partition(" ")[::2] for line in block.splitlines())
        branch = fields.get("branch", "").removeprefix("refs/heads/") or None
        found.append((Path(fields["worktree"]), branch))
    return found


def _job_id_of(path: Path, branch: str | None, worktrees_dir: Path) -> str | None:
    """The reflection job a worktree belongs to, by its branch or its place; else None."""
    if branch is not None and branch.startswith(BRANCH_PREFIX):
        return branch.removeprefix(BRANCH_PREFIX)
    if path.resolve().parent == worktrees_dir.resolve():
        return path.name
    return None


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


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
