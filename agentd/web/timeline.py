"""The memory timeline: the newest commits of an agent's memory, each with who made it
(:mod:`shared.memory.provenance`), its diff, and for a reflection the outcome that
merged it (from the reflections log, whose ``commits`` name what each merge brought).

Blocking (git, the outcome log): run :func:`read_timeline` in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.memory import git
from shared.memory.provenance import CommitProvenance, recent_commits
from shared.memory.repo import MemoryRepo
from shared.models.reflection import ReflectionOutcome
from shared.reflection import events

MAX_DIFF_CHARS = 20_000
"""A commit's diff is cut after this much: the page stays light; git has the rest."""
_RECORD = "\x1e"


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    commit: CommitProvenance
    diff: str
    diff_cut: bool
    outcome: ReflectionOutcome | None
    """The reflection outcome whose merge brought this commit, if any."""


def read_timeline(repo: MemoryRepo, reflections_dir: Path, limit: int) -> list[TimelineEntry]:
    commits = recent_commits(repo, limit)
    diffs = _diffs(repo, limit)
    merged_by = _outcomes_by_commit(events.read(reflections_dir, tail=max(limit, 200)))
    entries = []
    for commit in commits:
        diff = diffs.get(commit.sha, "")
        outcome = next(
            (o for length, found in merged_by.items() if (o := found.get(commit.sha[:length]))),
            None,
        )
        entries.append(
            TimelineEntry(commit, diff[:MAX_DIFF_CHARS], len(diff) > MAX_DIFF_CHARS, outcome)
        )
    return entries


def _diffs(repo: MemoryRepo, limit: int) -> dict[str, str]:
    """Each of the newest ``limit`` commits' patch, by sha, from one ``git log``; a merge's
    against its first parent (what it changed on ``main``)."""
    output = git.run(
        repo.path,
        "log",
        f"-n{limit}",
        f"--format={_RECORD}%H",
        "--patch",
        "--no-color",
        "--no-ext-diff",
        "--diff-merges=first-parent",
    ).stdout
    diffs = {}
    for record in output.split(_RECORD):
        sha, _, patch = record.partition("\n")
        if sha:
            diffs[sha.strip()] = patch.strip("\n")
    return diffs


def _outcomes_by_commit(
    outcomes: list[ReflectionOutcome],
) -> dict[int, dict[str, ReflectionOutcome]]:
    """Outcomes by the short shas they name, grouped by the shas' length (git chose it)."""
    found: dict[int, dict[str, ReflectionOutcome]] = {}
    for outcome in outcomes:
        for short in outcome.commits:
            found.setdefault(len(short), {})[short] = outcome
    return found
