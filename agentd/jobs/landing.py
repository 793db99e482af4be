"""How a reflection's commits reach the memory repo: fetched, re-signed, checked, handed back.

Everything a model committed in a job's private clone comes into the parent through
:func:`land_locked`, the one way in, before anything is merged, held or judged:

1. the clone's ``HEAD`` is fetched into a scratch ref of the parent
   (``refs/reflection-incoming/<job>``), never straight into the branch;
2. every commit of it that memory does not already have (not in the parent's history, the
   job's base, or what this job already landed) is rebuilt under the job's
   :class:`~shared.memory.signing.Signature` (:func:`shared.memory.signing.resign`): the
   reflection identity and the job's trailers for the sub-agent's work, the agent's own
   name and trailers for its follow-ups in explicit merge mode. Whatever author, committer
   or trailers the model wrote, ``memory log``, ``blame`` and ``why`` name the job;
3. every rebuilt commit's tree must hold what memory may (:mod:`shared.memory.content`):
   no gitlink or ``.git`` path, no file or whole over the limits; every one, not only the
   tip, since a merge brings the whole history along. A violation raises its typed error
   (``nested_repository``, ``memory_too_large``) and the branch is left as it was;
4. only then is ``reflection/<job>`` moved to the rebuilt tip, and the clone handed the
   rebuilt commits back (its branch and ``HEAD`` set to them: same trees, so its checkout
   stays clean). A later fetch of the same clone (finalize fetches again) then finds
   nothing new and leaves the branch as it is, and the agent reviewing the proposal builds
   on what landed, so only its own commits are rebuilt as its own.

Every git command runs through :mod:`shared.memory.git`; the caller holds the memory lock
and has made the clone safe to read (:func:`shared.memory.clone.secure`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from shared.memory import content, git
from shared.memory.content import MemoryLimits
from shared.memory.provenance import AGENT_ID, JOB_ID, PARENT_AGENT_ID, REFLECTED_MESSAGES
from shared.memory.repo import MemoryRepo
from shared.memory.signing import Signature, resign
from shared.reflection.payload import PayloadFile

log = structlog.get_logger(__name__)

INCOMING_PREFIX = "refs/reflection-incoming/"
MEMORY_REF = "refs/remotes/memory/main"
"""Where the clone holds the memory's latest HEAD for the agent reviewing a proposal
(``memory/main`` to git in the clone): a remote-tracking ref, so it is never checked out
and can always be updated."""
MAX_COMMITS = 500
"""New commits one job may land; a reflection makes a handful (:class:`TooManyCommits`)."""
_FETCH = ("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules")


@dataclass(frozen=True, slots=True)
class Landing:
    """Where a job's commits come from and go, and who they land as."""

    clone: Path
    branch: str
    """``reflection/<job_id>`` in the parent (and in the clone)."""
    base_head: str
    job_id: str
    signature: Signature
    limits: MemoryLimits


def reflection_trailers(agent_id: str, job_id: str, payload: PayloadFile) -> dict[str, str]:
    """The trailers of a reflection commit: the sub-agent, its parent, the messages the
    payload gave it (first..last, as its task prompt named them) and the job."""
    first, last = payload.slices[0].slice.start_id, payload.slices[-1].slice.end_id
    return {
        AGENT_ID: f"{agent_id}~reflection",
        PARENT_AGENT_ID: agent_id,
        REFLECTED_MESSAGES: f"{first}..{last}",
        JOB_ID: job_id,
    }


def land_locked(parent: MemoryRepo, landing: Landing) -> str | None:
    """Bring the clone's ``HEAD`` into ``landing.branch``, re-signed and checked; why it
    could not be fetched, or None. Raises :class:`~shared.errors.MemoryContentError` (the
    branch unchanged) when the commits hold what memory may not, and
    :class:`~shared.errors.TooManyCommits`."""
    incoming = INCOMING_PREFIX + landing.job_id
    fetched = git.run(parent.path, *_FETCH, str(landing.clone), f"+HEAD:{incoming}", check=False)
    if fetched.returncode != 0:
        return f"the reflection's commits could not be fetched: {git.first_line(fetched.stderr)}"
    try:
        fetched_tip = git.run(parent.path, "rev-parse", "--verify", f"{incoming}^{{commit}}")
        tip, rebuilt = resign(
            parent.path,
            fetched_tip.stdout.strip(),
            exclude=_landed(parent.path, landing),
            signature=landing.signature,
            max_commits=MAX_COMMITS,
        )
    finally:
        git.run(parent.path, "update-ref", "-d", incoming, check=False)
    for commit in rebuilt:  # each of them: merged, the whole history comes along
        content.refuse(content.scan_tree(parent.path, commit, landing.limits))
    git.run(parent.path, "update-ref", f"refs/heads/{landing.branch}", tip)
    _hand_back(parent.path, landing)
    log.info("reflection_landed", job_id=landing.job_id, tip=tip, author=landing.signature.name)
    return None


def share_latest(parent_dir: Path, clone: Path) -> None:
    """Put the memory's current ``HEAD`` in the clone as ``memory/main``, for the agent
    reviewing the proposal there; the clone must be safe to run git in."""
    git.run(clone, *_FETCH, str(parent_dir), f"+HEAD:{MEMORY_REF}")


def _landed(parent_dir: Path, landing: Landing) -> list[str]:
    """What needs no re-signing: memory's history, the job's base, and what this job
    landed before (the branch, which only the harness moves)."""
    known = ["HEAD", landing.base_head]
    branch = f"refs/heads/{landing.branch}"
    if git.run(parent_dir, "show-ref", "--verify", "--quiet", branch, check=False).returncode == 0:
        known.append(branch)
    return known


def _hand_back(parent_dir: Path, landing: Landing) -> None:
    """Set the clone's branch and ``HEAD`` to the re-signed commits: the same trees as
    what it held, so its index and files match them as they matched the originals."""
    ref = f"refs/heads/{landing.branch}"
    git.run(landing.clone, *_FETCH, "--update-head-ok", str(parent_dir), f"+{ref}:{ref}")
    git.run(landing.clone, "symbolic-ref", "HEAD", ref)
