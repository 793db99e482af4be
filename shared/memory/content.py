"""What memory may hold: no repository inside it, and no file or whole larger than allowed.

Two rules, checked wherever content enters memory (the agent's tools, a reflection's
branch, an import, a hand edit):

- **No nested repository.** A ``.git`` directory or file anywhere below memory's root (or
  a gitlink, mode 160000, in a commit's tree) is never memory content. Git descends into
  such a repository for ``status`` and ``add`` and obeys *its* config there, so a model
  that could leave one behind could name a filter driver our own git would run outside
  every sandbox (issue 21). Refusing it outright is simpler and safer than trusting every
  git command to stay out.
- **Bounded sizes.** A per-file and a whole-memory limit in bytes (:class:`MemoryLimits`,
  ``AGENTD_MEMORY_FILE_MAX_BYTES`` and ``AGENTD_MEMORY_MAX_BYTES``), with defaults no
  person writing notes comes near: memory is compiled into prompts and copied into every
  reflection, and a 20 MB file is an attack or an accident, never a note.

:func:`scan_checkout` reads a working checkout (what the next commit would take);
:func:`scan_tree` reads a committed tree without a checkout (a reflection's branch).
Both return :class:`Violation` s; :func:`refuse` turns the first into its typed error.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import MemoryContentError, MemoryRepoError, MemoryTooLarge, NestedRepository
from shared.memory import git
from shared.memory.hand_edits import commit_command

Rule = Literal["nested_repository", "file_too_large", "memory_too_large"]

DEFAULT_FILE_MAX_BYTES = 1024 * 1024
"""1 MiB: about 250k tokens, far past any note a person writes by hand."""
DEFAULT_MEMORY_MAX_BYTES = 32 * 1024 * 1024
_GITLINK_MODE = b"160000"


class MemoryLimits(BaseModel):
    """Size limits of one agent's memory, in bytes."""

    model_config = ConfigDict(frozen=True)

    file_bytes: int = Field(default=DEFAULT_FILE_MAX_BYTES, ge=1)
    total_bytes: int = Field(default=DEFAULT_MEMORY_MAX_BYTES, ge=1)


@dataclass(frozen=True, slots=True)
class Violation:
    """One thing memory may not hold: ``path`` relative to the root (``""``: all of it)."""

    rule: Rule
    path: str
    size: int = 0
    """The file's (or memory's) size in bytes, for the size rules."""
    limit: int = 0


def is_git_name(name: str) -> bool:
    """Whether a path component would be git's own directory on some file system.

    Case-folded, since git on a case-insensitive file system treats ``.GIT`` as ``.git``."""
    return name.casefold() == ".git"


@dataclass(frozen=True, slots=True)
class Checkout:
    """What a walk of a checkout found: the nested ``.git`` entries and every file's size."""

    nested: list[str]
    """Paths of ``.git`` directories, files or links below the root, relative to it."""
    sizes: dict[str, int]
    """Each file's size in bytes by relative path; a link counts as 0 (its own few bytes,
    never its target's)."""

    def violations(self, limits: MemoryLimits) -> list[Violation]:
        found = [Violation("nested_repository", path) for path in self.nested]
        found += [
            Violation("file_too_large", path, size, limits.file_bytes)
            for path, size in self.sizes.items()
            if size > limits.file_bytes
        ]
        total = sum(self.sizes.values())
        if total > limits.total_bytes:
            found.append(Violation("memory_too_large", "", total, limits.total_bytes))
        return found


def read_checkout(root: Path) -> Checkout:
    """Walk the checkout at ``root`` without following links and without entering a nested
    ``.git`` (nor the root's own)."""
    root = root.absolute()
    nested: list[str] = []
    sizes: dict[str, int] = {}
    for directory, subdirs, files in os.walk(root, followlinks=False):
        here = Path(directory)
        relative = here.relative_to(root)
        for name in [*subdirs, *files]:
            if is_git_name(name) and (here != root or name != ".git"):
                nested.append((relative / name).as_posix())
        subdirs[:] = [name for name in subdirs if not is_git_name(name)]
        for name in files:
            if is_git_name(name):
                continue
            try:
                info = os.lstat(here / name)
            except FileNotFoundError:
                continue  # removed while we walked
            sizes[(relative / name).as_posix()] = info.st_size if stat.S_ISREG(info.st_mode) else 0
    return Checkout(sorted(nested), sizes)


def scan_checkout(root: Path, limits: MemoryLimits) -> list[Violation]:
    """What the checkout at ``root`` holds that memory may not, read from the file system
    (:func:`read_checkout`)."""
    return read_checkout(root).violations(limits)


def scan_tree(repo_dir: Path, rev: str, limits: MemoryLimits) -> list[Violation]:
    """What commit ``rev`` of the repo at ``repo_dir`` holds that memory may not.

    Reads ``git ls-tree`` only: no checkout, no attribute, nothing the tree names runs."""
    if not rev or rev.startswith("-"):
        raise MemoryRepoError(f"invalid revision {rev!r}")
    listing = git.run(repo_dir, "ls-tree", "-r", "-l", "-z", "--full-tree", rev, binary=True)
    found: list[Violation] = []
    total = 0
    for entry in listing.stdout.split(b"\0"):
        if not entry:
            continue
        info, raw_path = entry.split(b"\t", 1)
        mode, _kind, _sha, size_field = info.split(maxsplit=3)
        path = raw_path.decode("utf-8", "replace")
        if mode == _GITLINK_MODE or any(is_git_name(part) for part in path.split("/")):
            found.append(Violation("nested_repository", path))
            continue
        size = int(size_field) if size_field.strip().isdigit() else 0
        total += size
        if size > limits.file_bytes:
            found.append(Violation("file_too_large", path, size, limits.file_bytes))
    if total > limits.total_bytes:
        found.append(Violation("memory_too_large", "", total, limits.total_bytes))
    return found


def describe(violation: Violation) -> str:
    """One sentence a user (or a model) can act on."""
    if violation.rule == "nested_repository":
        return (
            f"{violation.path} is a git repository inside memory; memory holds plain files "
            "only (a nested repository's config could make agentd's own git run commands)"
        )
    if violation.rule == "file_too_large":
        return (
            f"{violation.path} is {violation.size:,} bytes, over the {violation.limit:,}-byte "
            "limit for one memory file (AGENTD_MEMORY_FILE_MAX_BYTES)"
        )
    return (
        f"memory would hold {violation.size:,} bytes, over its {violation.limit:,}-byte limit "
        "(AGENTD_MEMORY_MAX_BYTES)"
    )


def error_for(violation: Violation, then: str = "") -> MemoryContentError:
    """The typed error for ``violation``; ``then`` says what became of it."""
    kind = NestedRepository if violation.rule == "nested_repository" else MemoryTooLarge
    message = describe(violation) + (f". {then}" if then else "")
    return kind(message, path=violation.path, rule=violation.rule)


def refuse(violations: Iterable[Violation]) -> None:
    """Raise the typed error of the first violation, if there is one; nested repositories
    first, since they are the dangerous ones."""
    ordered = sorted(violations, key=lambda found: found.rule != "nested_repository")
    if ordered:
        raise error_for(ordered[0])


def notice(agent: str, memory_dir: Path, violations: list[Violation]) -> str:
    """What ``agentctl status`` and ``agentd doctor`` say about memory holding what it may
    not (a hand edit put it there, or a git of the user's), with what to do about each."""
    parts = []
    for violation in violations:
        if violation.rule == "nested_repository":
            where = shlex.quote(str(memory_dir / violation.path))
            parts.append(
                f"{violation.path} is a git repository inside memory: agentd commits nothing "
                f"while it is there, and the agent's next edit deletes it; move it out of "
                f"memory or delete it (`rm -rf {where}`)"
            )
        else:
            parts.append(f"{describe(violation)}: shrink or split it")
    commit = f"`{commit_command(agent)}`"
    sizes = any(violation.rule != "nested_repository" for violation in violations)
    return "; ".join(parts) + (f", then commit with {commit}" if sizes else "")
