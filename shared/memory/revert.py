"""Undo one memory commit (a reflection, a turn's edit, a hand edit) as the user.

A ``git revert`` under the memory lock, committed as the user with the trailers
``Edited-By: user`` and ``Reverts: <sha>``. A merge commit is reverted against its first
parent, which undoes everything that merge brought in; a reflection commit behind a merge
(what ``agentctl memory blame`` names) is reverted alone.

A revert that would conflict, because later commits changed the same lines, is refused
with :class:`RevertConflict` and leaves memory exactly as it was: the revert is aborted
at once and the checkout checked clean, the way a failed reflection merge is. A checkout
with uncommitted changes is refused before anything runs: the revert must not mix the
user's half-done edit into its commit, nor be undone over it.

The whole revert runs in one thread that holds the lock itself (as a reflection's merge
does), so a caller that gives up waiting never releases the lock under a running git.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from shared.errors import MemoryConflict, MemoryRepoError, RevertConflict, UnknownRevision
from shared.memory import git, git_locks
from shared.memory.provenance import (
    USER_EMAIL,
    USER_NAME,
    CommitProvenance,
    commit_provenance,
    user_trailers,
    with_trailers,
)
from shared.memory.repo import MemoryRepo
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock


class Reverted(BaseModel):
    """What a revert undid, and the commit that undid it (None: nothing left to undo)."""

    model_config = ConfigDict(frozen=True)

    reverted: CommitProvenance
    commit: CommitProvenance | None


def revert(
    repo: MemoryRepo, rev: str, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> Reverted:
    """Revert the commit ``rev`` names and commit that as the user. Blocking (git, lock)."""
    with file_lock(repo.lock_path, lock_timeout_s):
        target = commit_provenance(repo, rev)
        before = repo.head()
        if git.run(
            repo.path, "merge-base", "--is-ancestor", target.sha, before, check=False
        ).returncode:
            raise UnknownRevision(
                f"commit {target.short_sha} is not in this agent's memory history (not an "
                "ancestor of HEAD); list its commits with `agentctl memory log`"
            )
        if uncommitted := repo.uncommitted():
            raise MemoryConflict(
                f"the memory checkout has uncommitted changes ({', '.join(uncommitted[:5])}); "
                "nothing was reverted. Commit them with `agentctl memory commit` (or discard "
                "them), then revert again"
            )
        repo.ensure_unlocked()
        _start(repo, target, before)
        try:
            sha = repo.commit_all(
                _message(target),
                author_name=USER_NAME,
                author_email=USER_EMAIL,
                by="user",
                concludes_revert=True,
            )
        except BaseException:
            _abort(repo)
            raise
        if sha is None:
            git.run(repo.path, "revert", "--quit")
        return Reverted(
            reverted=target, commit=None if sha is None else commit_provenance(repo, sha)
        )


def _start(repo: MemoryRepo, target: CommitProvenance, before: str) -> None:
    """``git revert --no-commit``: the inverse change staged, or nothing changed at all.

    Not repeated after a lock failure (it may have stopped halfway): aborted instead."""
    mainline = ["--mainline", "1"] if len(target.parents) > 1 else []
    proc = git.run_once(repo.path, "revert", "--no-commit", *mainline, target.sha)
    if proc.returncode == 0:
        return
    conflicted = git.run(repo.path, "diff", "--name-only", "--diff-filter=U").stdout.split()
    _abort(repo)
    if repo.head() != before or repo.uncommitted():
        raise MemoryRepoError(
            f"reverting {target.short_sha} failed and left {repo.path} changed; check it "
            f"with `git -C {repo.path} status`"
        )
    lock = git_locks.blocking_lock(proc.stderr)
    if lock is not None:
        raise git_locks.busy(lock)
    where = f" in {', '.join(conflicted)}" if conflicted else ""
    raise RevertConflict(
        f"cannot revert {target.short_sha} ({target.subject}): later commits changed the "
        f"same lines{where}; nothing was changed. Edit the file by hand instead "
        "(`agentctl memory edit PATH`), or revert those later commits first"
    )


def _abort(repo: MemoryRepo) -> None:
    """``git revert --abort``: back to HEAD, keeping changes the revert did not touch."""
    if (repo.path / ".git" / "REVERT_HEAD").exists():
        git.run(repo.path, "revert", "--abort")


def _message(target: CommitProvenance) -> str:
    message = f'Revert "{target.subject}"\n\nThis reverts commit {target.sha}.'
    return with_trailers(message, user_trailers(reverts=target.sha))
