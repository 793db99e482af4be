"""A reflection job's checkout: a private clone of the memory repo, and its way back.

The sub-agent edits memory in its own checkout (``reflections/worktrees/<job_id>``, outside
the repo dir, on branch ``reflection/<job_id>``) so it never shares an index with the
daemon, which commits to ``main`` every turn. The checkout is a clone of the parent's
HEAD commit alone (``fetch --depth 1``), not a linked worktree: a linked worktree shares
its parent's ``.git`` (hooks, config, refs), so a sub-agent able to commit could plant a
hook that runs outside its sandbox or move the parent's ``main``
(``../shared/spec/sandbox.md``). Nor a ``clone --shared``: its ``objects/info/alternates``
names the parent's object store by its host path, which the sandbox would have to show
(and then the model reads where the home is). The shallow clone holds everything it
needs: no alternates, nothing of the parent in the sandbox. It costs about what a shared
clone does (on a memory of 3,000 commits in loose objects, as agentd leaves them:
0.2 s against 0.08 s; a full copy took 10 s), since it copies one tree, not the history.
Its commits come back only through :func:`collect`: the harness first puts the clone's
git metadata back the way it made it (config, no hooks, no ``commondir``, no
alternates, its one shallow commit), then lands the clone's ``HEAD`` as the parent's
``reflection/<job_id>`` branch, re-signed and checked (:mod:`reflector.landing`). Every
git command here runs through :mod:`shared.memory.git`, inert to hooks and config planted
in either repo. Jobs may run twice, so every step here is safe to repeat;
:func:`sweep_orphans` clears what killed jobs left behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from reflector.landing import INCOMING_PREFIX, Landing, land_locked
from shared import sandbox
from shared.errors import NestedRepository
from shared.ids import validate_id
from shared.memory import content, git, git_pin
from shared.memory.content import MemoryLimits, Violation
from shared.memory.provenance import JOB_ID
from shared.memory.repo import MemoryRepo
from shared.memory.signing import Signature
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
    signature: Signature | None = None
    """Who its commits land as (:mod:`reflector.landing`); by default the reflection
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
    trailers: Mapping[str, str | None] | None = None,
    limits: MemoryLimits | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Worktree:
    """Clone the parent's HEAD to ``worktrees_dir/<job_id>`` on branch ``reflection/<job_id>``.

    A checkout or branch left by an earlier run of the same job (a redelivery) is removed
    first, so the job starts again from the current parent HEAD. The clone has no remote
    (nothing to push to) and no hooks; its commits land as the sub-agent's
    (``author_email``) with ``trailers`` (by default the job id) and must keep within
    ``limits``. Holds the memory lock while it reads HEAD and removes leftovers.
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
    signature = Signature(SUBAGENT_NAME, author_email, trailers or {JOB_ID: job_id})
    worktree = Worktree(
        job_id,
        path,
        branch,
        base_head,
        parent.path,
        author_email,
        signature,
        limits or MemoryLimits(),
    )
    worktrees_dir.mkdir(parents=True, exist_ok=True)
    git.run(worktrees_dir, "init", "--quiet", "--template=", str(path))
    # The commit itself, not a branch: HEAD may have moved since it was read.
    fetch = ["fetch", "--quiet", "--depth", "1", "--no-tags", "--no-write-fetch-head"]
    git.run(path, *fetch, str(parent.path), base_head)
    restore_metadata(worktree)
    git.run(path, "checkout", "--quiet", "-b", branch, base_head)
    log.info("reflection_worktree_created", job_id=job_id, base_head=base_head)
    return worktree


def collect(worktree: Worktree, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> bool:
    """Land the clone's ``HEAD`` in the parent as ``reflection/<job_id>``, re-signed and
    checked (:mod:`reflector.landing`); False if the clone cannot be trusted (its git dir
    was replaced) or is gone. Commits holding what memory may not raise its typed error.

    Safe to repeat: the branch is moved to whatever the clone holds now. Under the memory
    lock, since it writes the parent's objects and refs.
    """
    with MemoryRepo(worktree.parent_dir) as parent, file_lock(parent.lock_path, lock_timeout_s):
        return collect_locked(parent, worktree) is None


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
            owner = sandbox.scratch_owner(entry.name)
            if (owner or entry.name) in live_job_ids:
                continue
            if owner is not None:  # what a killed sandboxed command left beside its checkout
                sandbox.remove_scratch(entry)
                continue
            purge(entry)
            done.append(f"removed leftover checkout {entry.name}")
        # Linked worktrees of agentd before private clones: their dirs are gone now.
        git.run(parent.path, "worktree", "prune")
        for branch in _reflection_branches(parent.path):
            if branch.removeprefix(BRANCH_PREFIX) not in live_job_ids:
                git.run(parent.path, "branch", "-D", branch)
                done.append(f"deleted branch {branch}")
        for ref in _refs(parent.path, INCOMING_PREFIX):  # a landing killed halfway
            if ref.removeprefix(INCOMING_PREFIX) not in live_job_ids:
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


def secure(worktree: Worktree) -> str | None:
    """Make the clone's git dir safe for the harness's git, or say why it cannot be: the
    one gate before any harness git runs in the clone or fetches from it.

    A nested repository anywhere in the clone's checkout raises :class:`NestedRepository`
    (the job fails ``nested_repository``): ``git status`` or ``add`` there could descend
    into it and obey its config. Nothing of it is read or removed: the clone is deleted
    with the job."""
    refused = untrusted(worktree)
    if refused is None:
        content.refuse(nested_repositories(worktree))
        restore_metadata(worktree)
    return refused


def nested_repositories(worktree: Worktree) -> list[Violation]:
    """Every ``.git`` below the clone's root (directory, file or link), read from the file
    system alone."""
    found = content.read_checkout(worktree.path).nested
    return [Violation("nested_repository", path) for path in found]


def fetch_locked(parent: MemoryRepo, worktree: Worktree) -> str | None:
    r"""Land a :func:`secure`\ d clone's ``HEAD`` (:func:`reflector.landing.land_locked`);
    why it could not be fetched, or None."""
    return land_locked(parent, worktree.landing)


def untrusted(worktree: Worktree) -> str | None:
    """Why the clone's git dir cannot be read safely, or None. The sub-agent may replace
    ``.git`` by a link or a ``gitdir:`` file pointing at another repo (the parent's, another
    agent's): git would follow it outside the sandbox."""
    git_dir = worktree.path / ".git"
    if worktree.path.is_symlink() or git_dir.is_symlink() or not git_dir.is_dir():
        return "the reflection replaced its checkout's .git; nothing was taken from it"
    # restore_metadata writes below these: a link here would aim its writes at the parent.
    for directory in (git_dir / "objects", git_dir / "objects" / "info"):
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            where = directory.relative_to(worktree.path)
            return f"the reflection replaced {where} by a link; nothing was taken from it"
    return None


def restore_metadata(worktree: Worktree) -> None:
    """Put the clone's git dir back as the harness made it, before any harness git runs in
    it or fetches from it: our config, no hooks, no ``commondir``, ``info/`` holding only
    the attributes that unset every filter and driver (:mod:`shared.memory.git_pin`), no
    alternates (another repo's objects), and ``shallow`` naming only the commit it
    started from, whose history it does not hold."""
    git_dir = worktree.path / ".git"
    for name in ("hooks", "info", "commondir", "config.worktree", "worktrees", "shallow"):
        purge(git_dir / name)
    (git_dir / "config").unlink(missing_ok=True)
    config = CLONE_CONFIG.format(name=SUBAGENT_NAME, email=worktree.author_email)
    (git_dir / "config").write_text(config, encoding="utf-8")
    git_pin.write_attributes(git_dir)
    (git_dir / "shallow").write_text(f"{worktree.base_head}\n", encoding="utf-8")
    for name in ("alternates", "http-alternates"):
        (git_dir / "objects" / "info" / name).unlink(missing_ok=True)


def _force_remove(parent_dir: Path, path: Path, branch: str) -> bool:
    """Remove checkout ``path`` and ``branch`` whatever their state; True if any existed."""
    existed = path.exists() or path.is_symlink()
    purge(path)
    if branch_exists(parent_dir, branch):
        git.run(parent_dir, "branch", "-D", branch)
        existed = True
    return existed


def branch_exists(parent_dir: Path, branch: str) -> bool:
    ref = f"refs/heads/{branch}"
    return git.run(parent_dir, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0


def _reflection_branches(parent_dir: Path) -> list[str]:
    return [ref.removeprefix("refs/heads/") for ref in _refs(parent_dir, "refs/heads/reflection/")]


def _refs(parent_dir: Path, prefix: str) -> list[str]:
    return git.run(parent_dir, "for-each-ref", "--format=%(refname)", prefix).stdout.split()


def _dir_entries(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.is_dir() else []


def purge(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
