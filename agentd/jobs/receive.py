"""A worker's commits, received: checked against what the daemon sent before any of them
comes near memory.

The answer's bundle is fetched into a clone the daemon makes of memory at the commit it
sent (:func:`agentd.jobs.checkout.create_worktree`), never into memory itself: whatever
the bundle holds lands in that clone's object store, and only what the checks let through
is later fetched into memory by :func:`agentd.jobs.checkout.collect` (re-signed and
checked again for content by :mod:`agentd.jobs.landing`). Refused, each as
:class:`~shared.errors.InvalidAnswer` with nothing merged:

- a bundle that is not the answer's: another ref than its one ``HEAD``, or more than
  one; a prerequisite other than the commit the job was sent (the work must build on it);
- commits it claims and does not carry, or carries and does not claim (the answer's list
  is exactly the commits between the base and its tip), or that do not all descend from
  the base (another history, another agent's, grafted in);
- commits memory already has in its history: the worker claims work it did not do (an
  agent's own edit, re-signed as the reflection's, would lie about who wrote it);
- objects the commits do not reach: whatever else the pack carried (another agent's
  memory, say) is not the answer.

A bundle git cannot read is :class:`~shared.errors.BundleError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agentd.jobs.checkout import Worktree, create_worktree
from shared.errors import InvalidAnswer
from shared.memory import bundles, git
from shared.memory.clone import purge
from shared.memory.content import MemoryLimits
from shared.reflection.job import JobAnswer

ANSWER_REF = "refs/heads/{branch}"


def receive(
    parent_dir: Path,
    worktrees_dir: Path,
    answer: JobAnswer,
    bundle: Path,
    *,
    base_head: str,
    author_email: str,
    trailers: Mapping[str, str | None],
    limits: MemoryLimits,
) -> Worktree:
    """A clone of memory at ``base_head`` holding the answer's commits on its branch,
    checked out; :class:`InvalidAnswer` (the clone removed) when they are not what the
    answer says."""
    header = bundles.read_header(bundle)
    if header.refs != [(answer.head, bundles.ANSWER_REF)]:
        raise InvalidAnswer(
            f"the worker's bundle brings {_named(header.refs)}, not the one commit it "
            "answered with; nothing was merged"
        )
    if header.prerequisites != [base_head]:
        raise InvalidAnswer(
            "the worker's commits do not build on the memory the job was sent "
            f"({base_head[:12]}); nothing was merged"
        )
    worktree = create_worktree(
        parent_dir,
        worktrees_dir,
        answer.reflection_id,
        author_email=author_email,
        base_head=base_head,
        trailers=trailers,
        limits=limits,
    )
    try:
        ref = ANSWER_REF.format(branch=worktree.branch)
        git.run(worktree.path, "checkout", "--quiet", "--detach")
        tip = bundles.fetch_answer(bundle, worktree.path, ref)
        _check(worktree, answer, tip)
        git.run(worktree.path, "checkout", "--quiet", worktree.branch)
    except BaseException:
        purge(worktree.path)
        raise
    return worktree


def _check(worktree: Worktree, answer: JobAnswer, tip: str) -> None:
    base = worktree.base_head
    made = git.run(worktree.path, "rev-list", "--reverse", tip, f"^{base}").stdout.split()
    if made != answer.commits:
        raise InvalidAnswer(
            f"the worker's bundle holds {len(made)} commit(s), not the {len(answer.commits)} "
            "its answer names; nothing was merged"
        )
    descended = git.run(
        worktree.path, "rev-list", "--ancestry-path", tip, f"^{base}"
    ).stdout.split()
    if set(descended) != set(made):
        raise InvalidAnswer(
            "some of the worker's commits do not descend from the memory the job was "
            "sent (another history was grafted in); nothing was merged"
        )
    known = [sha for sha in made if _in_history(worktree.parent_dir, sha)]
    if known:
        raise InvalidAnswer(
            f"the worker's answer claims {len(known)} commit(s) memory already has "
            f"({known[0][:12]}): work it did not do; nothing was merged"
        )
    stray = bundles.stray_objects(worktree.path, [tip])
    if stray:
        raise InvalidAnswer(
            f"the worker's bundle carries {len(stray)} object(s) its commits do not reach "
            f"({stray[0][:12]}); nothing was merged"
        )


def _in_history(parent_dir: Path, sha: str) -> bool:
    """Whether memory's history (any branch of it) holds commit ``sha``."""
    exists = git.run(parent_dir, "cat-file", "-e", f"{sha}^{{commit}}", check=False)
    if exists.returncode != 0:
        return False
    holding = git.run(parent_dir, "branch", "--contains", sha, check=False).stdout
    return bool(holding.strip())


def _named(refs: list[tuple[str, str]]) -> str:
    if not refs:
        return "no ref"
    return ", ".join(f"{name} ({sha[:12]})" for sha, name in refs[:3])
