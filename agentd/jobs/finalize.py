"""The end of a reflection job for memory: decide its outcome, merge what it earned, clean up.

Only :func:`finalize` touches the parent checkout, following the safe merge-back protocol
of stack.md §5: a ``merge-tree`` dry run first, then, under the memory lock and only with
a clean parent and no git lock in the way, a fast-forward or a ``--no-ff`` merge that is
aborted at once if it fails. Leaving a conflicted merge behind is the one thing we must
never do: the daemon's next commit would seal the conflict markers into memory. The parent
checkout is never reset or cleaned: ``merge --abort`` is the only undo, so an edit the user
makes in it meanwhile survives. A git lock in the way is removed when a dead git left it
and is :class:`MemoryBusy` when a live git holds it (:mod:`shared.memory.git_locks`),
never a merge conflict. What is merged is what :func:`agentd.jobs.checkout.collect` landed
from the job's private clone: re-signed by the harness and checked
(:mod:`agentd.jobs.landing`). Jobs may run twice, so every step here is safe to repeat.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from agentd.jobs.checkout import Worktree, fetch_locked
from shared.errors import MemoryRepoError, NestedRepository
from shared.memory import git, git_locks
from shared.memory.clone import branch_exists, purge, secure
from shared.memory.provenance import JOB_ID, with_trailers
from shared.memory.repo import MemoryRepo
from shared.memory.signing import one_line
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

log = structlog.get_logger(__name__)

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
    reason: str | None = None
    """The outcome's reason when the status alone does not say it (``failed`` because the
    clone held a nested repository: ``nested_repository``)."""

    @property
    def consumed(self) -> bool:
        """Whether the transcript slice counts as reflected (spec §4: merged, no_changes)."""
        return self.status in ("merged", "no_changes")


def finalize(
    worktree: Worktree,
    *,
    should_merge: bool,
    require_already_merged: bool = False,
    failure_summary: str | None = None,
    uncommitted: Sequence[str] = (),
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> FinalizeResult:
    """Decide the job's outcome, merge if it earned it, and remove the checkout and branch.

    ``uncommitted``: files the worker's own clone changed and did not commit (the daemon's
    clone holds only what it committed).

    The first matching row of spec §4 wins (rows 0 ``knownNoChanges`` and 5 "refresh from
    origin" do not exist here: callers always know the worktree, and memory has no origin):

    0'. the clone's ``.git`` is no longer the directory we made, or its checkout holds a
       nested repository (``reason`` ``nested_repository``) → ``failed``/reflection,
       nothing read from it;
    1. uncommitted changes in the checkout or ``uncommitted`` → ``dirty_uncommitted`` (before
       ``should_merge``, so a failed sub-agent that left edits ends here too);
    2. ``should_merge`` false (the sub-agent failed) → ``failed``/reflection;
    2'. its ``HEAD`` cannot be landed as ``reflection/<job_id>`` → ``failed``/reflection
       (commits memory may not hold raise their typed error instead);
    3. no commits since ``base_head`` → ``no_changes``;
    4. the branch is already in the parent's history → ``merged``;
    5. parent checkout dirty → ``parent_dirty`` (its files are left alone);
    6. ``require_already_merged`` → ``failed``/integration: it was not merged;
    7. the merge would conflict or fails → ``merge_conflict``, parent unchanged;
    7'. a live git holds a lock the merge needs → :class:`MemoryBusy` raised, nothing
       merged (a lock left by a dead git is removed first);
    8. otherwise fast-forward (parent unmoved) or merge commit → ``merged``.

    With ``require_already_merged`` (explicit merge mode, after the agent's turn) the
    checkout is not read again: what is judged is the branch as the harness last landed
    it (:mod:`agentd.jobs.integration`), whatever the agent did in its checkout afterwards.

    Repeating is safe. A branch already in the parent's history (a run that merged, then
    died before cleanup) is reported ``merged`` without merging again. A missing checkout
    whose branch survives is judged like ``require_already_merged``: nothing can be
    checked there, so nothing unverified is merged. If the branch is gone too (a second
    finalize) the result is ``failed``/integration "already finalized": not consumed,
    because the first outcome is unknown and consuming is irreversible, while a retry is
    harmless.

    Consumed outcomes clean up gently (``branch -d``), the others by force; the checkout is
    always deleted. Everything happens under the memory lock; :class:`LockTimeout` or a git error
    propagates with nothing reported, and the daemon's next start clears what is left
    (:func:`agentd.jobs.checkout.sweep_orphans`).
    """
    with MemoryRepo(worktree.parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        result = _decide(
            parent,
            worktree,
            should_merge=should_merge,
            require_already_merged=require_already_merged,
            failure_summary=failure_summary,
            uncommitted=uncommitted,
        )
        _cleanup(parent.path, worktree, gently=result.consumed)
    _log_outcome(worktree, result)
    return result


# --- finalize -------------------------------------------------------------------------


def _decide(
    parent: MemoryRepo,
    worktree: Worktree,
    *,
    should_merge: bool,
    require_already_merged: bool,
    failure_summary: str | None,
    uncommitted: Sequence[str],
) -> FinalizeResult:
    """The outcome row of spec §4 that applies; merges on the last row."""
    missing = not worktree.path.exists()
    branch_only = missing or require_already_merged
    if branch_only:
        if not branch_exists(parent.path, worktree.branch):
            return _failed(
                "integration",
                f"nothing to finalize: job {worktree.job_id} has no "
                f"{'checkout or ' if missing else ''}branch left (already finalized?)",
            )
    else:
        try:
            refused = secure(worktree)
        except NestedRepository as exc:
            return _failed("reflection", exc.message).model_copy(update={"reason": exc.code})
        if refused is not None:
            return _failed("reflection", refused)
        if uncommitted or _has_uncommitted_changes(worktree.path):
            return FinalizeResult(
                status="dirty_uncommitted",
                message="the reflection's memory changes were not committed cleanly",
            )
    if not should_merge:
        return _failed("reflection", failure_summary or "the reflection did not complete cleanly")
    if not branch_only and (problem := fetch_locked(parent, worktree)) is not None:
        return _failed("reflection", problem)
    if branch_only:
        template = INTEGRATED_MESSAGE if require_already_merged else MERGED_MESSAGE
        result = merge_locked(parent, worktree, merge=False, template=template)
        if result.status != "failed":
            return result
        default = (
            "the reflection checkout disappeared and its branch did not merge"
            if missing
            else "the primary agent did not merge the reflection branch"
        )
        return _failed("integration", failure_summary or default, result.commit_count)
    return merge_locked(parent, worktree)


def merge_locked(
    parent: MemoryRepo,
    worktree: Worktree,
    *,
    merge: bool = True,
    template: str = MERGED_MESSAGE,
    summary: str | None = None,
    trailers: dict[str, str | None] | None = None,
) -> FinalizeResult:
    """Rows 3 to 8 for the landed branch; the caller holds the memory lock.

    ``merge`` false judges only (row 6 instead of 7 and 8: ``failed`` if not merged);
    ``template`` is the message of a ``merged`` found already merged.
    ``summary`` (one line, from the agent in explicit mode) and ``trailers`` make a merge
    commit even when a fast-forward would do: the agent's decision is recorded as one.
    """
    count = _commit_count(parent.path, worktree)
    if count == 0:
        return FinalizeResult(status="no_changes", message=NO_CHANGES_MESSAGE)
    if _is_ancestor(parent.path, worktree.branch, "HEAD"):
        return _merged(parent, count, template)
    if parent.is_dirty():
        return FinalizeResult(
            status="parent_dirty",
            commit_count=count,
            message="the parent memory repo had uncommitted changes",
        )
    if not merge:
        return _failed("integration", "not merged", count)
    return _merge(parent, worktree, count, summary, trailers or {JOB_ID: worktree.job_id})


def _merge(
    parent: MemoryRepo,
    worktree: Worktree,
    count: int,
    summary: str | None,
    trailers: dict[str, str | None],
) -> FinalizeResult:
    """Rows 7 and 8: dry-run the merge, then merge for real; never leave a merge behind.

    The merge itself is not run again after a lock failure: it may have stopped halfway.
    """
    predicted = _predicted_conflicts(parent.path, worktree.branch)
    if predicted:
        return _conflict(count, predicted, "")
    parent.ensure_unlocked()
    if summary is None and _is_ancestor(parent.path, "HEAD", worktree.branch):
        args = ["merge", "--ff-only", worktree.branch]
    else:
        said = one_line(summary or "") or _merge_summary(parent.path, worktree.branch)
        message = with_trailers(f"merge(reflection): {said}", trailers)
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
    subject = one_line(_git(parent_dir, "log", "-1", "--format=%s", branch).stdout)
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
    purge(worktree.path)
    if not branch_exists(parent_dir, worktree.branch):
        return
    if gently and _git(parent_dir, "branch", "-d", worktree.branch, check=False).returncode == 0:
        return
    if gently:
        log.warning("reflection_cleanup_forced", job_id=worktree.job_id)
    _git(parent_dir, "branch", "-D", worktree.branch)


def _log_outcome(worktree: Worktree, result: FinalizeResult) -> None:
    fields = {"job_id": worktree.job_id, "commit_count": result.commit_count}
    log.info("reflection_finalized", status=result.status, detail=result.message, **fields)
    if not result.consumed:
        log.info("reflection_worktree_cleanup", outcome=_CLEANUP_OUTCOME[result.status], **fields)


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


def _unmerged_files(parent_dir: Path) -> list[str]:
    proc = _git(parent_dir, "diff", "--name-only", "--diff-filter=U", check=False)
    return sorted(set(proc.stdout.split("\n")) - {""})
