"""What a memory commit does with content memory may not hold, before git stages anything.

:meth:`MemoryRepo.commit_all <shared.memory.repo.MemoryRepo.commit_all>` screens the
checkout first (:func:`screen`), so ``git add`` never meets a nested repository: ``add -A``
runs ``git status`` inside a tracked one whatever our ``-c`` options say, under *its*
config, which can name a filter (issue 21). Who wrote decides what happens
(:data:`Writer`):

- **The agent** (its tools, after each command or write): every nested ``.git`` is deleted
  (with Python; no git ever runs in it), each file it made or grew past the per-file limit
  is put back as it was at HEAD (deleted, if new), and while memory as a whole is over its
  limit and larger than at HEAD, the files that grew most are put back too. The rest of
  the change is committed, and the typed error tells the model what was refused. Leaving
  the content there would fail every later commit, and the dirty checkout would hold
  reflection back. A file already over a limit at HEAD that did not grow stays.
- **The user** (hand edits, ``agentctl memory commit``, a revert): refused whole while a
  nested repository is there, which stays for the user to move; nothing is deleted. Files
  over a size limit are committed: ``agentctl status`` and ``agentd doctor`` report them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

import structlog

from shared.errors import MemoryContentError
from shared.memory import content, git
from shared.memory.content import MemoryLimits, Violation

log = structlog.get_logger(__name__)

Writer = Literal["agent", "user"]
"""Who a commit is for: the agent's tools or the user's hand edits."""
_HEAD = "HEAD"
_LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}
"""Paths given to git are file names, never patterns (``*``, ``:(glob)``)."""
MOVE_IT = (
    "memory holds plain files only. Move that repository out of the memory directory (or "
    "delete its .git), then commit again"
)


def screen(root: Path, limits: MemoryLimits, by: Writer) -> MemoryContentError | None:
    """Deal with what the checkout at ``root`` holds that memory may not, as ``by`` says.

    Raises :class:`NestedRepository` for a user's commit with a nested repository in the
    checkout; for the agent's, returns the error naming the first thing taken out (the
    others listed in its message), or None when nothing was. Git runs here only once no
    nested repository is left."""
    checkout = content.read_checkout(root)
    if by == "user":
        refuse_nested(checkout)
        return None
    for path in checkout.nested:
        _remove(root / path)
    refused = [Violation("nested_repository", path) for path in checkout.nested]
    if any(found.rule != "nested_repository" for found in checkout.violations(limits)):
        refused += _undo_growth(root, checkout.sizes, limits)
    if not refused:
        return None
    for each in refused:
        log.warning(
            "memory_content_refused",
            path=str(root),
            rule=each.rule,
            file=each.path,
            size=each.size,
            limit=each.limit,
        )
    others = ", ".join(each.path or "memory as a whole" for each in refused[1:])
    more = f" (also refused: {others})" if others else ""
    return content.error_for(
        refused[0],
        f"It was taken out of memory and not committed{more}; the rest of the change was committed",
    )


def refuse_nested(checkout: content.Checkout) -> None:
    """A user's write or commit while a nested repository is in the checkout: refused
    with :class:`NestedRepository`, and the repository left for the user to move."""
    if checkout.nested:
        nested = Violation("nested_repository", checkout.nested[0])
        raise content.error_for(nested, f"Nothing was committed: {MOVE_IT}")


def _undo_growth(root: Path, sizes: dict[str, int], limits: MemoryLimits) -> list[Violation]:
    """Put back as at HEAD (or delete, if new) what grew past the limits: each file over
    the per-file limit and larger than at HEAD, then, while memory is over its whole limit
    and larger than at HEAD, the files that grew most."""
    at_head = _sizes_at_head(root)

    def growth(path: str) -> int:
        return sizes[path] - at_head.get(path, 0)

    refused = [
        Violation("file_too_large", path, size, limits.file_bytes)
        for path, size in sorted(sizes.items())
        if size > limits.file_bytes and growth(path) > 0
    ]
    undo = {violation.path for violation in refused}
    total = sum(sizes.values()) - sum(growth(path) for path in undo)
    if total > limits.total_bytes and total > sum(at_head.values()):
        refused.append(Violation("memory_too_large", "", sum(sizes.values()), limits.total_bytes))
        for path in sorted(sizes.keys() - undo, key=growth, reverse=True):
            if total <= limits.total_bytes or growth(path) <= 0:
                break
            undo.add(path)
            total -= growth(path)
    tracked = sorted(path for path in undo if path in at_head)
    if tracked:
        git.run(root, "checkout", "-q", _HEAD, "--", *tracked, env=_LITERAL)
    for path in undo.difference(tracked):
        (root / path).unlink(missing_ok=True)
    return refused


def _sizes_at_head(root: Path) -> dict[str, int]:
    """Each file's size at HEAD, read from the tree (``git ls-tree -l``)."""
    listing = git.run(root, "ls-tree", "-r", "-l", "-z", "--full-tree", _HEAD, binary=True)
    sizes = {}
    for entry in listing.stdout.split(b"\0"):
        info, _, name = entry.partition(b"\t")
        size = info.split()[-1] if info else b"-"
        if size.isdigit():
            sizes[name.decode("utf-8", "surrogateescape")] = int(size)
    return sizes


def _remove(path: Path) -> None:
    """Delete a nested ``.git`` without following a link: a link or file is removed
    itself, a directory with everything below it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
