"""A memory file edited by hand (``agentctl memory edit``): read it to edit, write it back.

The client edits a copy of the committed text and sends the result with the blob it
started from; the write is refused (:class:`MemoryConflict`) if the file changed
meanwhile, at HEAD (a reflection merged, the agent edited it) or in the checkout (edited
there and not committed), so nobody's change is overwritten unseen. The write and its
commit happen under the memory lock, as the user, like ``agentctl memory commit``; the
next turn of every conversation then carries ``<memory_update>`` naming the file.

A new file starts from frontmatter naming it (the description is for the user to fill
in: it is what the system prompt lists); text sent without any frontmatter gets it.

A write that fails leaves the checkout as it was, so the next unrelated edit (which
commits everything) never seals half of it: the text is written to a temporary file in
``.git`` and renamed over the file, and the file it replaces is kept (a hard link, no
space needed) until the commit lands. A full disk, for the file or for git's copy of it,
is :class:`DiskFull`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import structlog

from shared.errors import (
    DiskFull,
    FrontmatterError,
    MalformedRequest,
    MemoryConflict,
    MemoryPathError,
    MemoryRepoError,
)
from shared.memory import frontmatter, git
from shared.memory.provenance import USER_EMAIL, USER_NAME, user_trailers, with_trailers
from shared.memory.repo import MemoryRepo, validate_memory_path
from shared.store.writes import raise_if_disk_full, write_all

log = structlog.get_logger(__name__)

MEMORY_SUFFIX = ".md"
"""Only markdown files are memory: the system prompt lists nothing else."""
_WRITES = itertools.count()
"""Numbers each write's scratch files in ``.git``: one commit may write several files."""


@dataclass(frozen=True)
class Editable:
    """What the editor starts from."""

    path: str
    text: str
    blob: str | None
    """The file's blob at HEAD (None: a new file); the write must start from it."""


def editable_path(path: str) -> str:
    path = validate_memory_path(path)
    if not path.endswith(MEMORY_SUFFIX):
        raise MemoryPathError(
            f"memory path {path!r} is not a markdown file: memory files end in "
            f"{MEMORY_SUFFIX} (e.g. 'notes/project.md')"
        )
    return path


def read_for_edit(repo: MemoryRepo, path: str) -> Editable:
    """The committed text of ``path``, or a new file's frontmatter. Blocking (git)."""
    path = editable_path(path)
    _checkout_file(repo, path)
    blob = _blob_at_head(repo, path)
    if blob is None:
        return Editable(path, _new_file(path, ""), None)
    return Editable(path, repo.show(path), blob)


@dataclass
class Written:
    """A file :func:`write_by_hand` put in the checkout, and how to take it back."""

    repo: MemoryRepo
    path: str
    saved: Path | None
    """The file it replaced (a hard link in ``.git``); None: there was none."""
    made: list[Path] = field(default_factory=list)
    """Directories made for it, outermost first."""

    def undo(self) -> None:
        """Put the checkout (and the index, should ``git add`` have run) back as at HEAD."""
        target = self.repo.path / self.path
        if self.saved is not None:
            os.replace(self.saved, target)
        else:
            target.unlink(missing_ok=True)
        for directory in reversed(self.made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        git.run(self.repo.path, "reset", "--quiet", "--", self.path, check=False)
        log.info("memory_hand_edit_undone", path=self.path)

    def forget(self) -> None:
        """Drop the replaced file's link, once the edit is committed or undone."""
        if self.saved is not None:
            self.saved.unlink(missing_ok=True)


async def edit_by_hand(
    repo: MemoryRepo, path: str, text: str, base: str | None, message: str | None
) -> str | None:
    """Write ``text`` to ``path`` and commit it as the user, under the memory lock; the
    new commit (None: the text was what memory held). Refused if the file changed since
    ``base``; on any failure the checkout is as it was."""
    message = with_trailers(message or f"edit {path} by hand", user_trailers())
    return await write_and_commit(
        repo,
        message,
        lambda: [write_by_hand(repo, path, text, base)],
        author=(USER_NAME, USER_EMAIL),
        where=repo.path / path,
        needed=len(text.encode()),
    )


async def write_and_commit(
    repo: MemoryRepo,
    message: str,
    write: Callable[[], list[Written]],
    *,
    author: tuple[str, str],
    where: Path,
    needed: int,
) -> str | None:
    """Run ``write`` (blocking: it gets a thread) under the memory lock and commit what it
    wrote as ``author`` (name, email), a user's commit; the new commit, or None if nothing
    changed. ``write`` writes with :func:`write_by_hand`, raises before it writes anything
    it refuses, and leaves nothing behind if it fails halfway; if the commit fails, every
    file it wrote is put back. A full disk is :class:`DiskFull` (``where``: what was
    written, ``needed``: its bytes)."""
    written: list[Written] = []

    def undo() -> None:
        for each in reversed(written):
            each.undo()

    try:
        async with repo.edit(
            message, author_name=author[0], author_email=author[1], by="user"
        ) as change:
            written = await asyncio.to_thread(write)
            change.undo = undo
    except MemoryRepoError as exc:
        if not any(os.strerror(code) in exc.message for code in (errno.ENOSPC, errno.EDQUOT)):
            raise
        free = shutil.disk_usage(repo.path).free
        raise DiskFull(where, needed=needed, free=free) from exc
    finally:
        for each in written:
            each.forget()
    return change.after if change.after != change.before else None


def write_by_hand(repo: MemoryRepo, path: str, text: str, base: str | None) -> Written:
    """Write ``text`` to ``path`` in the checkout if it is still as it was at ``base``.

    Call it inside :meth:`MemoryRepo.edit` (it holds the memory lock, and commits), and
    give it the result's :meth:`Written.undo`. Blocking (git).
    """
    path = editable_path(path)
    target = _checkout_file(repo, path)
    if _blob_at_head(repo, path) != base:
        raise MemoryConflict(
            f"{path} changed in memory while you edited it (a reflection or the agent wrote "
            "it); nothing was written. Run `agentctl memory edit` again to start from the "
            "new text"
        )
    if path in repo.uncommitted():
        raise MemoryConflict(
            f"{path} has uncommitted changes in the memory checkout; nothing was written. "
            "Commit them first with `agentctl memory commit` (or discard them), then edit "
            "again"
        )
    try:
        meta, _body = frontmatter.parse(text)
    except FrontmatterError as exc:
        raise MalformedRequest(f"{path}: {exc}; nothing was written") from None
    if not meta and base is None:
        text = _new_file(path, text)
    return _replace(repo, path, target, text.encode("utf-8"))


def _replace(repo: MemoryRepo, path: str, target: Path, data: bytes) -> Written:
    """Put ``data`` at ``target`` in one rename, keeping the file it replaces; on failure
    nothing of it is left (:class:`DiskFull` for a full disk)."""
    git_dir = repo.path / ".git"
    name = f"agentd-edit-{os.getpid()}-{next(_WRITES)}"
    temporary = git_dir / f"{name}.tmp"
    written = Written(repo, path, None, _missing_parents(repo.path, target))
    try:
        for directory in written.made:
            directory.mkdir(mode=0o700)
        if target.exists():
            written.saved = git_dir / f"{name}.saved"
            written.saved.unlink(missing_ok=True)
            os.link(target, written.saved)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            if written.saved is not None:  # keep its mode (git records the executable bit)
                os.fchmod(descriptor, stat.S_IMODE(os.stat(written.saved).st_mode))
            write_all(descriptor, data)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        written.forget()
        for directory in reversed(written.made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise_if_disk_full(exc, target, len(data))
        raise
    return written


def _missing_parents(root: Path, target: Path) -> list[Path]:
    """The directories between ``root`` and ``target`` that do not exist, outermost first."""
    missing = []
    for parent in target.relative_to(root).parents:
        if parent != Path(".") and not (root / parent).exists():
            missing.append(root / parent)
    return missing[::-1]


def _new_file(path: str, body: str) -> str:
    name = PurePosixPath(path).stem
    return frontmatter.render({"name": name, "description": ""}, body)


def _checkout_file(repo: MemoryRepo, path: str) -> Path:
    """Where ``path`` lives in the checkout; refused if a link would lead it elsewhere or
    something other than a file is there."""
    root = repo.path.resolve()
    target = repo.path / path
    if not target.resolve().is_relative_to(root) or target.is_symlink():
        raise MemoryPathError(f"memory path {path!r} leads outside the memory directory")
    if target.exists() and not target.is_file():
        raise MemoryPathError(f"memory path {path!r} is not a file")
    return target


def _blob_at_head(repo: MemoryRepo, path: str) -> str | None:
    found = git.run(repo.path, "rev-parse", "--verify", "--quiet", f"HEAD:{path}", check=False)
    return found.stdout.strip() or None if found.returncode == 0 else None
