"""The user's answer to a held proposal: accept merges it into memory, reject drops it.

Both run whole in one thread that holds the memory lock (as a revert does), and both read
the proposal's state under it: of two answers at once, the first is made and the second
refused with :class:`ProposalAnswered`, whatever they were.

**Accept** merges the proposal's commits into memory as it is *now*, which may have moved
since the reflection started: always a merge commit (``--no-ff``), authored by the user
with the trailers ``Job-ID: <reflection>`` and ``Edited-By: user``, so ``memory log``
shows who let the change in and ``memory revert`` of that merge undoes all of it; the
reflection's own commits keep their provenance. Before anything is written: a checkout
with uncommitted edits is refused (:class:`MemoryConflict`), the merge is tried on trees
alone (``merge-tree``) and refused with :class:`ProposalConflict` when later changes
touched the same lines, and the merged tree is checked against the memory content rules
(no nested repository, the size limits) as every reflection's is. A merge that fails all
the same is aborted at once; the proposal then stays held. Commits already in memory (an
accept whose record was not written before a crash) are only marked accepted.

**Reject** marks the record rejected and deletes the ref; memory is not touched.

Neither moves the watermark: the messages the reflection read were counted as reflected
when it was held (see the README).
"""

from __future__ import annotations

from datetime import datetime

import structlog

from shared.errors import MemoryConflict, MemoryRepoError, ProposalConflict
from shared.memory import content, git, git_locks
from shared.memory.content import MemoryLimits
from shared.memory.proposals import Proposal, Proposals
from shared.memory.provenance import JOB_ID, USER_EMAIL, USER_NAME, user_trailers, with_trailers
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

log = structlog.get_logger(__name__)

ACCEPT_SUBJECT = "merge(reflection): accept held proposal {id}"


def accept(
    proposals: Proposals,
    proposal_id: str,
    *,
    limits: MemoryLimits,
    now: datetime,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Proposal:
    """Merge the held proposal into memory and record it accepted. Blocking (git, lock)."""
    repo = proposals.repo
    with file_lock(repo.lock_path, lock_timeout_s):
        proposal = proposals.get_held(proposal_id)
        _check_commit(proposals, proposal)
        if uncommitted := repo.uncommitted():
            raise MemoryConflict(
                f"the memory checkout has uncommitted changes ({', '.join(uncommitted[:5])}); "
                f"proposal {proposal.id} was not merged. Commit them with `agentctl memory "
                "commit` (or discard them), then accept again"
            )
        merge_commit: str | None = None
        if not _is_ancestor(proposals, proposal.head, "HEAD"):
            tree = _merged_tree(proposals, proposal)
            content.refuse(content.scan_tree(repo.path, tree, limits))
            merge_commit = _merge(proposals, proposal)
        answered = proposal.answered("accepted", now, merge_commit)
        proposals.save(answered)
        proposals.drop_ref(answered)
    log.info("proposal_accepted", proposal_id=proposal.id, merge_commit=merge_commit)
    return answered


def reject(
    proposals: Proposals,
    proposal_id: str,
    *,
    now: datetime,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Proposal:
    """Drop the held proposal; memory is left as it is. Blocking (git, lock)."""
    with file_lock(proposals.repo.lock_path, lock_timeout_s):
        answered = proposals.get_held(proposal_id).answered("rejected", now)
        proposals.save(answered)
        proposals.drop_ref(answered)
    log.info("proposal_rejected", proposal_id=answered.id)
    return answered


def _check_commit(proposals: Proposals, proposal: Proposal) -> None:
    found = git.run(
        proposals.repo.path, "cat-file", "-e", f"{proposal.head}^{{commit}}", check=False
    )
    if found.returncode != 0:
        raise MemoryRepoError(
            f"the commits of proposal {proposal.id} are no longer in the memory repo "
            f"({proposal.head[:12]} is missing); reject it"
        )


def _is_ancestor(proposals: Proposals, ancestor: str, descendant: str) -> bool:
    proc = git.run(
        proposals.repo.path, "merge-base", "--is-ancestor", ancestor, descendant, check=False
    )
    if proc.returncode not in (0, 1):
        raise MemoryRepoError(f"git merge-base failed: {git.first_line(proc.stderr)}")
    return proc.returncode == 0


def _merged_tree(proposals: Proposals, proposal: Proposal) -> str:
    """The tree memory would have with the proposal merged; :class:`ProposalConflict` if
    the merge would conflict. Writes objects only: no checkout, no ref."""
    proc = git.run(
        proposals.repo.path,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "HEAD",
        proposal.head,
        check=False,
    )
    if proc.returncode == 1:
        names = proc.stdout.split("\n\n", 1)[0].splitlines()[1:]
        raise _conflict(proposal, list(dict.fromkeys(name for name in names if name)))
    if proc.returncode != 0:
        raise MemoryRepoError(f"git merge-tree failed: {git.first_line(proc.stderr)}")
    return proc.stdout.splitlines()[0].strip()


def _merge(proposals: Proposals, proposal: Proposal) -> str:
    """Merge for real (``--no-ff``, as the user); the merge commit. Never left halfway."""
    repo = proposals.repo
    repo.ensure_unlocked()
    subject = ACCEPT_SUBJECT.format(id=proposal.id)
    body = f"Held because {proposal.destruction.describe()}; accepted by the user."
    message = with_trailers(f"{subject}\n\n{body}", {JOB_ID: proposal.id, **user_trailers()})
    author = {"GIT_AUTHOR_NAME": USER_NAME, "GIT_AUTHOR_EMAIL": USER_EMAIL}
    try:
        proc = git.run_once(
            repo.path, "merge", "--no-ff", "--no-edit", "-m", message, proposal.head, env=author
        )
    except MemoryRepoError:
        _abort(proposals)
        raise
    if proc.returncode == 0:
        return repo.head()
    files = git.run(repo.path, "diff", "--name-only", "--diff-filter=U", check=False).stdout
    _abort(proposals)
    lock = git_locks.blocking_lock(proc.stderr)
    if lock is not None:
        raise git_locks.busy(lock)
    raise _conflict(proposal, sorted(set(files.split()) - {""}))


def _abort(proposals: Proposals) -> None:
    if (proposals.repo.path / ".git" / "MERGE_HEAD").exists():
        git.run(proposals.repo.path, "merge", "--abort")


def _conflict(proposal: Proposal, files: list[str]) -> ProposalConflict:
    where = f" in {', '.join(files)}" if files else ""
    return ProposalConflict(
        f"proposal {proposal.id} conflicts with later memory changes{where}; nothing was "
        "merged and it stays held. Reject it, or make the change by hand (`agentctl memory "
        "edit PATH`) and then reject it"
    )
