"""A memory file edited by hand (``agentctl memory edit``): read it to edit, write it back.

The client edits a copy of the committed text and sends the result with the blob it
started from; the write is refused (:class:`MemoryConflict`) if the file changed
meanwhile, at HEAD (a reflection merged, the agent edited it) or in the checkout (edited
there and not committed), so nobody's change is overwritten unseen. The write and its
commit happen under the memory lock, as the user, like ``agentctl memory commit``; the
next turn of every conversation then carries ``<memory_update>`` naming the file.

A new file starts from frontmatter naming it (the description is for the user to fill
in: it is what the system prompt lists); text sent without any frontmatter gets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from shared.errors import MalformedRequest, MemoryConflict, MemoryPathError
from shared.memory import frontmatter, git
from shared.memory.repo import MemoryRepo, validate_memory_path

MEMORY_SUFFIX = ".md"
"""Only markdown files are memory: the system prompt lists nothing else."""


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


def write_by_hand(repo: MemoryRepo, path: str, text: str, base: str | None) -> None:
    """Write ``text`` to ``path`` in the checkout if it is still as it was at ``base``.

    Call it inside :meth:`MemoryRepo.edit` (it holds the memory lock, and commits).
    Blocking (git).
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
    except frontmatter.FrontmatterError as exc:
        raise MalformedRequest(f"{path}: {exc}; nothing was written") from None
    if not meta and base is None:
        text = _new_file(path, text)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


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
