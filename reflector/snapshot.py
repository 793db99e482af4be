"""The parent-memory snapshot a reflection sub-agent starts from (its task prompt's end).

A tree of every markdown file of the memory checkout, descriptions included, then the full
text of the ``system/`` files — what the agent itself sees in its prompt — capped at
40,000 characters with notices that name what was cut, so the sub-agent knows what to
read on demand. Paths are ``$MEMORY_DIR``-relative, never absolute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import structlog

from shared.errors import FrontmatterError
from shared.memory.frontmatter import parse

log = structlog.get_logger(__name__)


SNAPSHOT_CHAR_LIMIT = 40_000
MIN_SNAPSHOT_CHAR_LIMIT = 1_000
TREE_MAX_LINES = 500
TREE_MAX_CHARS = 20_000
TREE_MAX_CHILDREN_PER_DIR = 50
_SYSTEM_DIR = "system"
_MEMORY_DIR_VAR = "$MEMORY_DIR"


def parent_snapshot(
    worktree_path: Path,
    *,
    limit: int = SNAPSHOT_CHAR_LIMIT,
    max_children_per_dir: int = TREE_MAX_CHILDREN_PER_DIR,
) -> str:
    """The ``<parent_memory>`` block of the sub-agent's task prompt (spec §5).

    A tree of every ``.md`` file (non-system ones with their description), then the full
    text of each ``system/`` file: the sub-agent starts from what the parent sees in its
    own prompt and reads the rest on demand. At most ``limit`` characters; a file that
    does not fit is cut with a notice naming its ``$MEMORY_DIR`` path, so the sub-agent
    knows to read it. Paths are always ``$MEMORY_DIR``-relative: an absolute path would
    leak the host layout into the prompt and tempt the model into literal paths.
    """
    if limit < MIN_SNAPSHOT_CHAR_LIMIT:
        raise ValueError(f"snapshot limit must be at least {MIN_SNAPSHOT_CHAR_LIMIT} chars")
    files = _memory_files(worktree_path)
    tree = _render_tree(files, max_children_per_dir, max_chars=min(TREE_MAX_CHARS, limit // 2))
    header = ["<parent_memory>", "<memory_filesystem>", tree, "</memory_filesystem>"]
    out = _Output(limit, header, reserve=len(_omitted_files_notice(len(files))) + 1)
    if not files:
        out.lines.append("(no memory markdown files found)")
    omitted = 0
    for file in (f for f in files if f.rel_path.startswith(f"{_SYSTEM_DIR}/")):
        if not _append_file(out, file, limit):
            omitted += 1
    out.reserve = 0
    if omitted:
        out.append(_omitted_files_notice(omitted))
    out.lines.append("</parent_memory>")
    return "\n".join(out.lines)


@dataclass(frozen=True, slots=True)
class _MemoryFile:
    rel_path: str
    text: str
    description: str | None


@dataclass(slots=True)
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    is_file: bool = False
    description: str | None = None


@dataclass(slots=True)
class _Output:
    """Snapshot lines plus the budget, which always keeps room for the closing tag and
    ``reserve`` characters (for the final "omitted" notice)."""

    limit: int
    lines: list[str]
    reserve: int = 0

    def room(self) -> int:
        """Characters still free for one more line (its newline and the closing tag counted)."""
        used = sum(len(line) + 1 for line in self.lines) + len("</parent_memory>")
        return self.limit - used - self.reserve - 1

    def fits(self, *lines: str) -> bool:
        return sum(len(line) + 1 for line in lines) - 1 <= self.room()

    def append(self, *lines: str) -> bool:
        if not self.fits(*lines):
            return False
        self.lines.extend(lines)
        return True


def _memory_files(root: Path) -> list[_MemoryFile]:
    """Every ``.md`` file below ``root``: hidden entries and symlinks skipped (a link could
    point outside memory), directories before files, each level sorted by name."""
    files: list[_MemoryFile] = []

    def walk(directory: Path, prefix: str) -> None:
        entries = [e for e in directory.iterdir() if not e.name.startswith(".")]
        entries = [e for e in entries if not e.is_symlink()]
        for entry in sorted(entries, key=lambda e: (not e.is_dir(), e.name)):
            rel_path = f"{prefix}{entry.name}"
            if entry.is_dir():
                walk(entry, f"{rel_path}/")
            elif entry.is_file() and entry.name.endswith(".md"):
                text = entry.read_text(encoding="utf-8", errors="replace")
                files.append(_MemoryFile(rel_path, text, _description(text)))

    walk(root, "")
    return files


def _description(text: str) -> str | None:
    try:
        meta, _ = parse(text)
    except FrontmatterError:
        return None
    value = meta.get("description", "")
    joined = " ".join(value) if isinstance(value, list) else value
    return " ".join(joined.split()) or None


def _render_tree(files: list[_MemoryFile], max_children: int, *, max_chars: int) -> str:
    """The ``<memory_filesystem>`` tree; ``system/`` is listed even when empty."""
    root = _Node()
    root.children[_SYSTEM_DIR] = _Node()
    for file in files:
        node = root
        for part in file.rel_path.split("/"):
            node = node.children.setdefault(part, _Node())
        node.is_file = True
        if not file.rel_path.startswith(f"{_SYSTEM_DIR}/"):
            node.description = file.description
    lines = [f"{_MEMORY_DIR_VAR}/", *_tree_lines(root, "", max(1, max_children))]
    return "\n".join(_cap_tree(lines, _count_entries(root), max_chars=max_chars))


def _tree_lines(node: _Node, prefix: str, max_children: int) -> list[str]:
    ordered = sorted(node.children.items(), key=lambda item: (item[1].is_file, item[0]))
    shown, hidden = ordered[:max_children], len(ordered) - max_children
    lines: list[str] = []
    for index, (name, child) in enumerate(shown):
        last = index == len(shown) - 1 and hidden <= 0
        label = name if child.is_file else f"{name}/"
        if child.description:
            label += f" ({child.description})"
        lines.append(f"{prefix}{'└──' if last else '├──'} {label}")
        lines += _tree_lines(child, prefix + ("    " if last else "│   "), max_children)
    if hidden > 0:
        lines.append(f"{prefix}└── … ({hidden} more entries)")
    return lines


def _count_entries(node: _Node) -> int:
    return sum(1 + _count_entries(child) for child in node.children.values())


def _cap_tree(lines: list[str], total_entries: int, *, max_chars: int) -> list[str]:
    """At most TREE_MAX_LINES lines and ``max_chars`` chars, ending with a notice if cut."""
    if len(lines) <= TREE_MAX_LINES and len("\n".join(lines)) <= max_chars:
        return lines
    kept = lines[: TREE_MAX_LINES - 1]
    while len(kept) > 1:
        shown = len(kept) - 1
        notice = (
            f"[Tree truncated: showing {shown} of {total_entries} entries. "
            f"{max(1, total_entries - shown)} omitted.]"
        )
        if len("\n".join([*kept, notice])) <= max_chars:
            return [*kept, notice]
        kept.pop()
    return kept


def _omitted_files_notice(count: int) -> str:
    return (
        f"[Memory preview omitted {count} more system file(s): the snapshot budget was "
        f"exhausted. Read them from {_MEMORY_DIR_VAR}/{_SYSTEM_DIR}/ if needed.]"
    )


def _append_file(out: _Output, file: _MemoryFile, limit: int) -> bool:
    """Inline ``file`` whole, cut, or as an "omitted" notice; False if not even that fits."""
    path = f"{_MEMORY_DIR_VAR}/{file.rel_path}"
    head, tail = ["<memory>", f"<path>{path}</path>"], ["</memory>"]
    text = file.text.rstrip("\n")
    if out.append(*head, text, *tail):
        return True
    notice = (
        f"[Memory preview truncated: the snapshot is capped at {limit:,} characters. "
        f"Full file at {path}; read it directly if needed.]"
    )
    room = out.room() - sum(len(line) + 1 for line in (*head, notice, *tail))
    cut = text[: max(room, 0)].rstrip()
    if cut and out.append(*head, cut, notice, *tail):
        return True
    omitted = f"[Memory preview omitted: no room left in the snapshot. Full file at {path}.]"
    return out.append(*head, omitted, *tail)
