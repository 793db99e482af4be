"""The daemon's clones of a reflection: where a worker's commits are received and checked,
and where the agent reviews a proposal in explicit merge mode; and their way into memory.

A clone (:mod:`shared.memory.clone`) lives at ``reflections/worktrees/<job_id>``, outside
the repo dir, on branch ``reflection/<job_id>``, and holds the one memory commit it
started from (its snapshot bundle, as a job carries it) plus the job's commits: never a
linked worktree sharing memory's ``.git``, never alternates naming memory's objects. Its
commits come into memory only through :func:`collect`: the harness first makes the clone
safe to read (:func:`shared.memory.clone.secure`), then lands its ``HEAD`` as memory's
``reflection/<job_id>`` branch, re-signed and checked (:mod:`agentd.jobs.landing`). Every
git command here runs through :mod:`shared.memory.git`, inert to hooks and config planted
in either repo.

Only the daemon writes memory, and it settles one job of an agent at a time, so what a
crash leaves here (a clone, a ``reflection/*`` branch, a half-landed
``refs/reflection-incoming/*``) belongs to no live job once the daemon starts again:
:func:`sweep_orphans` removes all of it then, under the memory lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentd.jobs.landing import INCOMING_PREFIX, Landing, land_locked
from shared import sandbox
from shared.errors import NestedRepository
from shared.ids import validate_id
from shared.memory import bundles, git
from shared.memory.clone import (
    BRANCH_PREFIX,
    SUBAGENT_NAME,
    Clone,
    branch_exists,
    init_clone,
    purge,
    secure,
)
from shared.memory.content import MemoryLimits
from shared.memory.provenance import JOB_ID
from shared.memory.repo import MemoryRepo
from shared.memory.signing import Signature
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Worktree(Clone):
    """A daemon's clone of one job: what :func:`finalize` needs to know about it."""

    parent_dir: Path
    """The memory repo it came from and goes back to."""
    signature: Signature | None = None
    """Who its commits land as (:mod:`agentd.jobs.landing`); by default the reflection
    identity with the job's id as the one trailer."""
    limits: MemoryLimits = field(default_factory=MemoryLimits)
    """What its commits may hold (:mod:`shared.memory.content`)."""

    @property
    def landing(self) -> Landing:
        signature = self.signature or Signature(
            SUBAGENT_NAME, self.author_email, {JOB_ID: self.job_id}
        )
        return Landing(self.path, self.branch, self.base_head, self.job_id, signature, self.limits)


def create_worktree(
    parent_dir: Path,
    worktrees_dir: Path,
    job_id: str,
    *,
    author_email: str,
    base_head: str | None = None,
    trailers: Mapping[str, str | None] | None = None,
    limits: MemoryLimits | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Worktree:
    """Clone memory at ``base_head`` (default: its HEAD) to ``worktrees_dir/<job_id>`` on
    branch ``reflection/<job_id>``.

    A checkout or branch left by an earlier attempt of the same job is removed first.
    The clone has no remote (nothing to push to) and no hooks; its commits land as the
    reflection (``author_email``) with ``trailers`` (by default the job id) and must keep
    within ``limits``. Holds the memory lock while it reads HEAD and removes leftovers.
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
        base = base_head or parent.head()
        if _force_remove(parent.path, path, branch):
            log.warning("reflection_worktree_recreated", job_id=job_id)
    signature = Signature(SUBAGENT_NAME, author_email, trailers or {JOB_ID: job_id})
    worktree = Worktree(
        job_id=job_id,
        path=path,
        branch=branch,
        base_head=base,
        author_email=author_email,
        parent_dir=parent.path,
        signature=signature,
        limits=limits or MemoryLimits(),
    )
    init_clone(path, base, author_email)
    # The commit itself (HEAD may have moved since it was read), as the snapshot a job
    # carries: three times faster than a depth-1 fetch of it (2.4 s of 10 MB memory).
    snapshot = worktrees_dir / f".{job_id}.snapshot"
    snapshot.write_bytes(bundles.snapshot(parent.path, base))
    try:
        bundles.clone_snapshot(snapshot, path, branch)
    finally:
        snapshot.unlink(missing_ok=True)
    log.info("reflection_worktree_created", job_id=job_id, base_head=base)
    return worktree


def collect(worktree: Worktree, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> bool:
    """Land the clone's ``HEAD`` in the parent as ``reflection/<job_id>``, re-signed and
    checked (:mod:`agentd.jobs.landing`); False if the clone cannot be trusted (its git
    dir was replaced) or is gone. Commits holding what memory may not raise its typed
    error.

    Safe to repeat: the branch is moved to whatever the clone holds now. Under the memory
    lock, since it writes the parent's objects and refs.
    """
    with MemoryRepo(worktree.parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        return collect_locked(parent, worktree) is None


def sweep_orphans(
    parent_dir: Path, worktrees_dir: Path, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> list[str]:
    """Undo what a daemon killed mid-settle left behind; returns what was done, for the log.

    Aborts a merge left in the parent (MERGE_HEAD) and removes git lock files no live git
    holds (:meth:`MemoryRepo.recover`), then removes every reflection checkout, every
    ``reflection/*`` branch and every half-landed ref. Call it only while no job of the
    agent is being settled (the daemon's start). Leftovers are never merged: their job's
    answer is settled again, or the transcript reflected again.
    """
    worktrees_dir = worktrees_dir.absolute()
    with MemoryRepo(parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        done = parent.recover()
        for entry in sorted(worktrees_dir.iterdir()) if worktrees_dir.is_dir() else []:
            if sandbox.scratch_owner(entry.name) is not None:
                sandbox.remove_scratch(entry)  # what a killed sandboxed command left
                continue
            purge(entry)
            done.append(f"removed leftover checkout {entry.name}")
        git.run(parent.path, "worktree", "prune")  # agentd's linked worktrees of old
        for ref in _refs(parent.path, "refs/heads/" + BRANCH_PREFIX):
            git.run(parent.path, "update-ref", "-d", ref)
            done.append(f"deleted branch {ref.removeprefix('refs/heads/')}")
        for ref in _refs(parent.path, INCOMING_PREFIX):
            git.run(parent.path, "update-ref", "-d", ref)
            done.append(f"deleted {ref}")
    for action in done:
        log.warning("reflection_orphan_swept", path=str(parent_dir), action=action)
    return done


def collect_locked(parent: MemoryRepo, worktree: Worktree) -> str | None:
    """Fetch the clone's ``HEAD`` into ``reflection/<job_id>``; why not, or None if done."""
    try:
        refused = secure(worktree)
    except NestedRepository as exc:
        return exc.message
    return refused or fetch_locked(parent, worktree)


def fetch_locked(parent: MemoryRepo, worktree: Worktree) -> str | None:
    r"""Land a :func:`~shared.memory.clone.secure`\ d clone's ``HEAD``
    (:func:`agentd.jobs.landing.land_locked`); why it could not be fetched, or None."""
    return land_locked(parent, worktree.landing)


def _force_remove(parent_dir: Path, path: Path, branch: str) -> bool:
    """Remove checkout ``path`` and ``branch`` whatever their state; True if any existed."""
    existed = path.exists() or path.is_symlink()
    purge(path)
    if branch_exists(parent_dir, branch):
        git.run(parent_dir, "branch", "-D", branch)
        existed = True
    return existed


def _refs(parent_dir: Path, prefix: str) -> list[str]:
    return git.run(parent_dir, "for-each-ref", "--format=%(refname)", prefix).stdout.split()
