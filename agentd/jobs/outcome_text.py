"""What a reflection's outcome says: the sentences a user reads for the reasons that need
one (what happened, and what to do)."""

from __future__ import annotations

from pathlib import Path

from agentd.jobs.finalize import FinalizeResult
from shared.memory.hand_edits import commit_command, files_named
from shared.reflection.job import MemoryBudget


def waiting_for_commit(agent: str, uncommitted: list[str], memory_dir: Path) -> str:
    """Why a reflection is skipped while the memory checkout has hand edits, and how to go on."""
    return (
        f"Reflection waits: the memory repo has uncommitted changes "
        f"({files_named(uncommitted)}). Commit them with `{commit_command(agent)}`, or "
        f"discard them (`git -C {memory_dir} stash -u`); it runs again after the next turn."
    )


def over_budget_message(budget: MemoryBudget, floor_after: int) -> str:
    """Why a reflection that would grow core memory past its budget was not merged."""
    return (
        f"Not merged: with it, core memory (system/) would take ~{floor_after:,} tokens of "
        f"every prompt, over the {budget.limit_tokens:,} allowed (half the agent's "
        f"compaction threshold; ~{budget.floor_tokens:,} now). Move detail out of "
        "system/ files; the transcript can be retried."
    )


def explain(reason: str | None, result: FinalizeResult, agent: str) -> str:
    """A failed outcome's sentence for ``reason`` (finalize's own message otherwise)."""
    return {
        "not_read": "the reflector never read the transcript (no message of it came back in "
        "a tool result)",
        "empty_report": "the reflector gave no report",
        "max_steps": "the reflector ran out of steps",
        "parent_dirty": "the memory repo had uncommitted changes (commit them with "
        f"`{commit_command(agent)}`, or discard them)",
        "merge_conflict": "its updates conflicted with newer memory changes",
        "dirty_uncommitted": "its changes were not committed cleanly",
    }.get(reason or "", result.message or (reason or "failed"))
