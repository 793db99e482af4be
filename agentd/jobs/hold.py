"""A destructive reflection is held for the user instead of merged.

Checked once the job's commits are collected into the parent (``reflection/<id>``, as they
would land, with the harness's provenance) and before anything merges them, in either
merge mode: an explicit-mode integration never sees a held proposal. The rule is
:mod:`shared.memory.destructive`; the proposal is kept as :mod:`shared.memory.proposals`
describes, then the job's checkout and branch are cleaned up as for any job.

A held reflection *consumed* its transcript: the watermark moves past what the sub-agent
read and the retry backoff clears, as for ``merged``. Its messages were reflected; what
waits is the user's answer, so later reflections carry on from there (on memory without
the held change) instead of proposing the same deletion after every turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from agentd.jobs.checkout import Worktree
from shared.clock import Clock
from shared.memory import content, git
from shared.memory.destructive import judge
from shared.memory.proposals import Proposal, Proposals
from shared.memory.repo import MemoryRepo
from shared.models.reflection import ReflectionRequest
from shared.reflection import backoff
from shared.reflection.slices import Slice
from shared.reflection.state import advance
from shared.settings import Settings
from shared.store.layout import Layout
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock


class HoldContext(Protocol):
    """What the check needs of the job's context (:class:`agentd.jobs.settle.Desk`)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def clock(self) -> Clock: ...


def hold_if_destructive(
    worktree: Worktree,
    request: ReflectionRequest,
    reflection_id: str,
    ctx: HoldContext,
    *,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Proposal | None:
    """Keep the collected branch as a held proposal if it is destructive; the proposal, or
    None when the job may go on to merge.

    A branch memory may never hold (a nested repository, a file over its limit) is refused
    here with its typed error rather than kept for the user to accept."""
    parent = worktree.parent_dir
    head = git.run(parent, "rev-parse", "--verify", f"refs/heads/{worktree.branch}").stdout
    head = head.strip()
    destruction = judge(parent, worktree.base_head, head, ctx.settings.reflection_hold_share)
    if destruction is None:
        return None
    content.refuse(content.scan_tree(parent, head, ctx.settings.memory_limits))
    proposal = Proposal(
        id=reflection_id,
        agent_id=request.agent_id,
        request_id=request.request_id,
        conversation_ids=request.conversation_ids,
        created_at=ctx.clock(),
        base=worktree.base_head,
        head=head,
        destruction=destruction,
    )
    with MemoryRepo(parent) as repo, file_lock(repo.lock_path, lock_timeout_s):
        directory = Layout(ctx.settings.home).reflection_files(request.agent_id).proposals
        Proposals(repo, directory).hold(proposal)
    return proposal


def settle_held(
    consumed: Iterable[Slice],
    reflections_dir: Path,
    conversation_dir: Callable[[str], Path],
    clock: Clock,
) -> None:
    """Count a held job's transcript as reflected: clear the backoff, move the watermarks."""
    backoff.record_result(
        reflections_dir,
        consumed=True,
        backs_off=False,
        pause=None,
        now=clock(),
    )
    for read in consumed:
        advance(conversation_dir(read.conversation_id), read, clock=clock)


def held_message(proposal: Proposal, agent_name: str) -> str:
    """What the user is told (the outcome's message, shown once in chat)."""
    flag = f" --agent {agent_name}"
    return (
        f"Held for you, not merged: {proposal.destruction.describe()}. Review it with "
        f"`agentctl memory proposals{flag}`; `agentctl memory accept {proposal.id}{flag}` "
        f"merges it, `agentctl memory reject {proposal.id}{flag}` drops it."
    )
