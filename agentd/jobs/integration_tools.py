"""How the agent ends an explicit merge: it decides, the harness lands and merges.

``merge_proposal`` is the only way a reviewed proposal reaches memory. Under the memory
lock, for as long as that takes and no longer, the harness makes the proposal checkout
safe to read (:func:`shared.memory.clone.secure`), lands its ``HEAD`` (the agent's
follow-up commits re-signed as the agent's, the content checked:
:mod:`agentd.jobs.landing`) and merges it with its own inert git
(:func:`agentd.jobs.finalize.merge_locked`, always a merge commit carrying the agent's
summary). What went wrong comes back as the tool's result, for the agent to mend in the
checkout: uncommitted edits, content memory may not hold, a conflict with newer memory
(``memory/main`` is brought up to date first). It may try :data:`MAX_MERGE_ATTEMPTS`
times. ``decline_proposal`` records why not and ends the turn. A proposal whose last
landing was refused for its content and that the agent then left unmerged fails the job
with that refusal (``nested_repository``, ``memory_too_large``), as in auto mode.
"""

from __future__ import annotations

import asyncio

from agentd.jobs.checkout import Worktree, fetch_locked
from agentd.jobs.finalize import FinalizeResult, merge_locked
from agentd.jobs.landing import share_latest
from shared.agent.tools.args import NonBlankStr, ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.errors import LockTimeout, MemoryBusy, MemoryContentError, ToolError, TooManyCommits
from shared.memory import git
from shared.memory.clone import secure
from shared.memory.repo import MemoryRepo
from shared.memory.signing import one_line
from shared.store.locks import DEFAULT_LOCK_TIMEOUT_S, file_lock

MAX_MERGE_ATTEMPTS = 3
MAX_REASON_CHARS = 300


class Proposal:
    """One proposal under review and what became of it.

    ``worktree`` lands as the agent (its signature); the first landing, the reflection's
    own commits, happened before the review began."""

    def __init__(self, worktree: Worktree, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S):
        self.worktree = worktree
        self.lock_timeout_s = lock_timeout_s
        self.attempts = 0
        self.merged_head: str | None = None
        self.declined: str | None = None
        self.refused: MemoryContentError | None = None
        """Why its last landing was refused for content; the job fails with it if the
        agent merges nothing after."""

    def merge(self, summary: str) -> str:
        """Land and merge the checkout's ``HEAD``; what happened, for the agent."""
        if self.merged_head is not None:
            return f"Already merged (memory is at {self.merged_head[:12]}); end your turn."
        if self.attempts >= MAX_MERGE_ATTEMPTS:
            raise ToolError(
                f"merge_proposal was called {MAX_MERGE_ATTEMPTS} times already; nothing "
                "more is merged. Call decline_proposal with the reason, or end your turn."
            )
        self.attempts += 1
        parent_dir = self.worktree.parent_dir
        try:
            with MemoryRepo(parent_dir) as parent, file_lock(parent.lock_path, self.lock_timeout_s):
                result = self._land_and_merge(parent, summary)
                if result.status == "merge_conflict":
                    share_latest(parent.path, self.worktree.path)
        except (MemoryBusy, LockTimeout) as exc:
            self.attempts -= 1  # nothing was tried: a busy memory costs no attempt
            raise ToolError(f"memory is busy ({exc.message}); call merge_proposal again") from None
        return self._report(result)

    def decline(self, reason: str) -> str:
        if self.merged_head is not None:
            raise ToolError("the proposal is already merged; end your turn with a report")
        self.declined = one_line(reason, MAX_REASON_CHARS)
        return "Declined: nothing of the proposal is merged."

    def _land_and_merge(self, parent: MemoryRepo, summary: str) -> FinalizeResult:
        refused = secure(self.worktree)
        if refused is not None:
            raise ToolError(f"{refused}; nothing can be merged")
        status = git.run(self.worktree.path, "status", "--porcelain").stdout.split("\n")
        dirty = [line[3:] for line in status if len(line) > 3]
        if dirty:
            raise ToolError(
                f"the proposal checkout has uncommitted changes ({', '.join(dirty[:5])}): "
                "commit them (or discard them) and call merge_proposal again; nothing was "
                "merged"
            )
        try:
            problem = fetch_locked(parent, self.worktree)
            self.refused = None
        except (MemoryContentError, TooManyCommits) as exc:
            if isinstance(exc, MemoryContentError):
                self.refused = exc
            raise ToolError(
                f"not merged: {exc.message}. Fix it in the proposal checkout with a new "
                "commit and call merge_proposal again."
            ) from None
        if problem is not None:
            raise ToolError(f"{problem}; nothing was merged")
        trailers = dict(self.worktree.landing.signature.trailers)
        return merge_locked(parent, self.worktree, summary=summary, trailers=trailers)

    def _report(self, result: FinalizeResult) -> str:
        left = MAX_MERGE_ATTEMPTS - self.attempts
        if result.status == "merged":
            assert result.merged_head is not None
            self.merged_head = result.merged_head
            return (
                f"Merged into your memory (now at {result.merged_head[:12]}). End your turn "
                "with a short report."
            )
        if result.status == "merge_conflict":
            raise ToolError(
                f"not merged: {result.message}. memory/main now holds your latest memory: "
                "run `git merge memory/main` in the proposal checkout, resolve the "
                f"conflicts, commit, and call merge_proposal again ({left} call(s) left)."
            )
        if result.status == "parent_dirty":
            raise ToolError(
                "not merged: your memory repo has uncommitted changes that are not yours (a "
                "hand edit in progress). Leave them alone: call decline_proposal saying so."
            )
        raise ToolError(
            "not merged: the proposal holds no change to your memory. Commit a change in "
            "the proposal checkout, or call decline_proposal."
        )


class MergeProposal(Tool):
    name = "merge_proposal"
    description = (
        "Have the harness merge the proposal checkout's HEAD into your memory (commit "
        "everything first). summary: one line for the merge commit."
    )

    class Args(ToolArgs):
        summary: NonBlankStr

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        return await asyncio.to_thread(self.proposal.merge, args.summary)


class DeclineProposal(Tool):
    name = "decline_proposal"
    description = "Decline the proposal: nothing of it is merged. reason: why, in a sentence."

    class Args(ToolArgs):
        reason: NonBlankStr

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        return self.proposal.decline(args.reason)
