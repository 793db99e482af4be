"""``agentd doctor``'s look at each memory repo's walls: what keeps agentd's own git inert.

Bubblewrap working is half of the sandbox; the other half is that the harness's git, which
runs outside it, obeys nothing a model wrote (:mod:`shared.memory.git`). That holds while
each memory repo's ``.git/config`` is agentd's (no driver, include or remote), its
``.git/info/attributes`` unsets every filter and driver, and no nested repository sits in
the checkout. The daemon restores the first two before each git command; doctor reports
what it finds without writing (the config is read by git's own parser, which runs
nothing), and ``--fix`` restores them. A nested repository is the user's to move: doctor
names it. Files over the size limits (a hand edit put them there: reported, never refused)
have their own finding.
"""

from __future__ import annotations

from pathlib import Path

from agentd.stack.doctor_findings import Finding
from shared.errors import AgentdError
from shared.memory import git
from shared.memory.content import Violation, notice, read_checkout
from shared.settings import Settings
from shared.store.agents import AgentStore

FIX_WALLS = "run `agentd doctor --fix` (puts agentd's .git/config and .git/info/attributes back)"


def check_memory_walls(settings: Settings) -> Finding:
    """Each memory repo's pinned config and attributes, and no nested repository."""
    found: list[str] = []
    fixes: list[str] = []
    repos = _memory_dirs(settings)
    for name, memory in repos:
        try:
            problems = git.pin_problems(memory)
        except AgentdError as exc:  # .git a link or a file: git is not run there
            problems = [exc.message]
        if problems:
            found.append(f"{name}: {'; '.join(problems)}")
            fixes.append(FIX_WALLS)
        if nested := read_checkout(memory).nested:
            found.append(f"{name}: nested git repository {', '.join(nested)}")
            violations = [Violation("nested_repository", path) for path in nested]
            fixes.append(notice(name, memory, violations))
    if not found:
        return Finding(
            True,
            "git walls",
            f"{len(repos)} memory repo(s): agentd's own .git/config and attributes, no "
            "nested repository",
        )
    return Finding(False, "git walls", "; ".join(found), "; ".join(dict.fromkeys(fixes)))


def fix_memory_walls(settings: Settings) -> list[str]:
    """``agentd doctor --fix``: put each memory repo's config and attributes back."""
    lines = []
    for name, memory in _memory_dirs(settings):
        try:
            restored = git.pin(memory)
        except AgentdError as exc:
            lines.append(f"left {name}'s memory repo: {exc.message}")
            continue
        if restored:
            lines.append(f"restored {name}'s {' and '.join(restored)}")
    return lines


def check_memory_sizes(settings: Settings) -> Finding:
    """Memory files or memories over their size limits: committed by hand, reported here."""
    limits = settings.memory_limits
    over = []
    for name, memory in _memory_dirs(settings):
        found = read_checkout(memory).violations(limits)
        sizes = [v for v in found if v.rule != "nested_repository"]
        if sizes:
            over.append(f"{name}: {notice(name, memory, sizes)}")
    if not over:
        return Finding(
            True,
            "memory sizes",
            f"every memory within {limits.file_bytes:,} bytes a file, "
            f"{limits.total_bytes:,} in all",
        )
    return Finding(
        False,
        "memory sizes",
        "; ".join(over),
        "the agent's own writes past these limits are refused; shrink these files "
        "(the limits are AGENTD_MEMORY_FILE_MAX_BYTES and AGENTD_MEMORY_MAX_BYTES)",
    )


def _memory_dirs(settings: Settings) -> list[tuple[str, Path]]:
    records = AgentStore(settings.layout).scan().records
    found = [(record.name, settings.layout.memory_dir(record.id)) for record in records]
    return [(name, memory) for name, memory in found if memory.is_dir()]
