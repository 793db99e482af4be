"""Which changes to memory are destructive enough to wait for the user.

A reflection that ran ``git rm system/human.md system/persona.md`` was once merged like any
other: the agent's next turn knew nothing about the user, and nothing said why. Deleting
what the agent is told on every turn, or most of what it remembers, is the one change a
model should not be able to make alone. So a reflection's commits are compared with the
memory it started from, and they are *destructive* when they:

- **delete a core file**: a file under ``system/`` that was a regular file and no longer
  is (removed, renamed away, or replaced by a link or a gitlink, which the system prompt
  does not read either);
- **empty a core file**: a ``system/`` markdown file whose body (the text after its
  frontmatter, what the system prompt shows) had a non-blank line and has none; wiping
  ``human.md``'s content while keeping the file is the same loss;
- **remove a large share of memory**: more lines removed than added, by more than
  ``hold_share`` (``AGENTD_REFLECTION_HOLD_SHARE``) of memory's lines at the start *and*
  by more than :data:`MIN_REMOVED_LINES`. The floor keeps a small memory from being held
  for every consolidation: in a 20-line memory, merging duplicates may remove 7 lines,
  a third of it, and that is what reflection is for.

Lines are counted by ``git diff --numstat`` over every file (a binary file counts none).
Everything here reads git objects only, through the inert helper: no checkout is read
and nothing the tree names runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.errors import FrontmatterError
from shared.memory import frontmatter, git
from shared.memory.compile import SYSTEM_DIR

MIN_REMOVED_LINES = 10
"""A reflection is held for removed lines only when it removes more than this many (net)."""
_REGULAR_MODES = frozenset({"100644", "100755"})

HoldReason = Literal["system_file_deleted", "system_file_emptied", "lines_removed"]


class Destruction(BaseModel):
    """What makes a change destructive: every rule it breaks, with its numbers."""

    model_config = ConfigDict(frozen=True)

    deleted: list[str]
    """``system/`` files it deletes."""
    emptied: list[str]
    """``system/`` files whose body it empties."""
    lines_before: int
    """Memory's lines where the change starts."""
    added: int
    removed: int
    hold_share: float
    """The share of ``lines_before`` it may remove (net) without being held."""
    files_changed: int

    @property
    def net_removed(self) -> int:
        return self.removed - self.added

    @property
    def reason(self) -> HoldReason:
        """The outcome's reason: the first rule it breaks."""
        if self.deleted:
            return "system_file_deleted"
        if self.emptied:
            return "system_file_emptied"
        return "lines_removed"

    def describe(self) -> str:
        """Every rule it breaks, as a clause: "it deletes system/human.md; …"."""
        clauses = []
        if self.deleted:
            clauses.append(f"deletes {_names(self.deleted)}")
        if self.emptied:
            clauses.append(f"empties {_names(self.emptied)}")
        if _too_many_removed(self.lines_before, self.net_removed, self.hold_share):
            clauses.append(
                f"removes {self.net_removed:,} of memory's {self.lines_before:,} lines (net), "
                f"more than {self.hold_share:.0%} (AGENTD_REFLECTION_HOLD_SHARE)"
            )
        return "it " + "; ".join(clauses)

    def diffstat(self) -> str:
        """``git diff --shortstat``'s line: "2 files changed, 1 insertion(+), 9 deletions(-)"."""
        return (
            f"{self.files_changed} file{'s' * (self.files_changed != 1)} changed, "
            f"{self.added} insertion{'s' * (self.added != 1)}(+), "
            f"{self.removed} deletion{'s' * (self.removed != 1)}(-)"
        )


def judge(repo_dir: Path, base: str, head: str, hold_share: float) -> Destruction | None:
    """How commit ``head`` destroys memory relative to ``base``; None when it does not."""
    before = system_files(repo_dir, base)
    after = system_files(repo_dir, head)
    deleted = sorted(path for path in before if path not in after)
    emptied = sorted(
        path
        for path, blob in before.items()
        if path.endswith(".md")
        and path in after
        and after[path] != blob
        and _has_body(repo_dir, blob)
        and not _has_body(repo_dir, after[path])
    )
    changes = _numstat(repo_dir, base, head)
    added = sum(added for added, _ in changes.values())
    removed = sum(removed for _, removed in changes.values())
    lines_before = sum(
        added for added, _ in _numstat(repo_dir, _empty_tree(repo_dir), base).values()
    )
    if not (deleted or emptied or _too_many_removed(lines_before, removed - added, hold_share)):
        return None
    return Destruction(
        deleted=deleted,
        emptied=emptied,
        lines_before=lines_before,
        added=added,
        removed=removed,
        hold_share=hold_share,
        files_changed=len(changes),
    )


def _too_many_removed(lines_before: int, net_removed: int, hold_share: float) -> bool:
    return net_removed > MIN_REMOVED_LINES and net_removed > hold_share * lines_before


def system_files(repo_dir: Path, rev: str) -> dict[str, str]:
    """The regular files under ``system/`` at ``rev``, path → blob: what the system prompt
    can show in full (a link or a gitlink there shows nothing)."""
    listing = git.run(repo_dir, "ls-tree", "-r", "-z", "--full-tree", rev, "--", SYSTEM_DIR)
    files = {}
    for entry in listing.stdout.split("\0"):
        if not entry:
            continue
        info, path = entry.split("\t", 1)
        mode, kind, blob = info.split(" ")
        if kind == "blob" and mode in _REGULAR_MODES:
            files[path] = blob
    return files


def _has_body(repo_dir: Path, blob: str) -> bool:
    """Whether the file shows a non-blank line in the system prompt: the body after its
    frontmatter, or the whole text when the frontmatter is unreadable (as compile does)."""
    text = git.run(repo_dir, "cat-file", "blob", blob).stdout
    try:
        _meta, body = frontmatter.parse(text)
    except FrontmatterError:
        body = text
    return bool(body.strip())


def _numstat(repo_dir: Path, old: str, new: str) -> dict[str, tuple[int, int]]:
    """Lines added and removed per changed file from ``old`` to ``new`` (binary: none)."""
    output = git.run(
        repo_dir,
        "diff",
        "--numstat",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        "--no-textconv",
        old,
        new,
    ).stdout
    changes = {}
    for entry in output.split("\0"):
        if not entry:
            continue
        added, removed, path = entry.split("\t", 2)
        changes[path] = (_count(added), _count(removed))
    return changes


def _count(field: str) -> int:
    return int(field) if field.isdigit() else 0


def _empty_tree(repo_dir: Path) -> str:
    """The empty tree's id in this repo's hash (git knows the object without storing it)."""
    return git.run(repo_dir, "hash-object", "-t", "tree", "--stdin", stdin="").stdout.strip()


def _names(paths: list[str]) -> str:
    return paths[0] if len(paths) == 1 else ", ".join(paths[:-1]) + " and " + paths[-1]
