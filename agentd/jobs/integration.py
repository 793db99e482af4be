"""Explicit merge mode: the main agent reviews a reflection's proposal; the harness merges it.

It runs in the daemon, not on a worker, once the worker's commits are received
(:mod:`agentd.jobs.receive`): the review is the agent's own turn — its own model and keys,
which a worker host does not hold, its memory compiled into its prompt — and its
``merge_proposal`` writes memory under the memory lock, which only the daemon takes. It
runs on the daemon's event loop like any turn, and a chat waits for none of it.

With ``merge: explicit`` the harness does not merge on its own. It opens an integration
conversation in which the agent — its own model, its own memory in the prompt — reviews
the proposal in the job's private clone (the proposal checkout, ``/proposal`` to its
shell) and decides. What it may touch is that clone: its shell sees the clone (writable,
self-contained: no alternates), never the memory repo itself, so nothing it
does can plant a config, an attribute or a hook that the harness's git would obey later,
nor move memory's refs (an integration agent that could write memory's ``.git`` could
name a ``filter.*.clean`` run by every later memory commit). The memory as it is now is in
the clone as ``memory/main``, to review the proposal against and to merge into it.

The agent may add follow-up commits there; it lands the proposal by calling
``merge_proposal`` (:mod:`agentd.jobs.integration_tools`): the harness then lands the clone's
``HEAD`` (re-signed, the agent's commits as the agent's, and checked:
:mod:`agentd.jobs.landing`) and merges it with its own inert git under the memory lock, taken
only for that and never for the agent's whole turn (the daemon's turns need it). A
conflict comes back as the tool's result with ``memory/main`` brought up to date, so the
agent can merge it in the clone, resolve and call again; ``decline_proposal`` ends the
turn. Whatever the agent says, the verdict is git's: the job finalizes with
``require_already_merged``, so the proposal counts as merged only if the branch the
harness landed is in memory's history.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import structlog
from pydantic import BaseModel

from agentd.jobs.checkout import Worktree, collect
from agentd.jobs.finalize import FinalizeResult, finalize
from agentd.jobs.integration_tools import (
    MAX_MERGE_ATTEMPTS,
    DeclineProposal,
    MergeProposal,
    Proposal,
)
from agentd.jobs.landing import share_latest
from shared import sandbox
from shared.agent.loop import Turn, run_turn
from shared.agent.prompts import INTEGRATION_MARKER
from shared.agent.rules import ToolRules
from shared.agent.tools.base import ToolContext, no_memory_edit
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile, ReadFile
from shared.agent.tools.view import PROPOSAL, PathView
from shared.clock import Clock, utc_now
from shared.memory import git
from shared.memory.clone import secure
from shared.memory.compile import compile_system_prompt
from shared.memory.provenance import AGENT_ID, JOB_ID
from shared.memory.repo import MemoryRepo
from shared.memory.signing import Signature
from shared.models.agents import AgentRecord
from shared.providers.base import Provider
from shared.reflection.verdict import final_report
from shared.store.conversations import Conversation
from shared.store.layout import JobLayout

log = structlog.get_logger(__name__)

MAX_STEPS = 20
NOT_MERGED = "the agent did not merge the proposal"


class IntegrationRun(BaseModel):
    stop_reason: str
    report: str
    error_message: str | None = None
    conversation_id: str


def has_proposal(worktree: Worktree) -> bool:
    """Did the sub-agent commit anything to review? Lands its commits in the memory repo as
    ``worktree.branch`` (:func:`collect`), re-signed as the reflection's. Edits it left
    uncommitted are no proposal: the harness's finalize reports them as it does in auto
    mode (``dirty_uncommitted``)."""
    if not collect(worktree):
        return False
    revs = f"{worktree.base_head}..{worktree.branch}"
    return int(git.run(worktree.parent_dir, "rev-list", "--count", revs).stdout.strip() or 0) > 0


def agent_signature(agent: AgentRecord, job_id: str) -> Signature:
    """Who the agent's follow-up commits land as: the agent, with the job's id."""
    return Signature(agent.name, f"{agent.id}@agentd.local", {AGENT_ID: agent.id, JOB_ID: job_id})


class IntegrationBash(Bash):
    """The agent's bash while it reviews: the proposal checkout (``/proposal``) is all it
    sees of the host besides the minimal system; the memory repo itself, ``.git`` and all,
    is not there."""

    description = (
        "Run bash in the proposal checkout ($PROPOSAL_DIR); returns the output. Your memory "
        "as it is now is the branch memory/main there. Background jobs are killed."
    )

    def walls(self, ctx: ToolContext) -> sandbox.Walls:
        names = ctx.names()
        proposal = sandbox.Bind(ctx.workspace, names.inside(ctx.workspace), writable=True)
        return sandbox.Walls(cwd=names.inside(ctx.workspace), binds=(proposal,))


def integration_view(worktree: Worktree) -> PathView:
    """The reviewing agent's one place: the proposal at ``/proposal`` (its host path where
    bash runs bare)."""
    return PathView.of((PROPOSAL, worktree.path))


def integration_task(*, worktree: Worktree, reflection_id: str, instructions: str) -> str:
    task = f"""{INTEGRATION_MARKER} Reflection integration (reflection {reflection_id})
A background reflection proposes memory changes for you to review before they land.
- Proposal checkout: $PROPOSAL_DIR, branch {worktree.branch}. Your bash runs there, and
  relative paths of your file tools start there. Your memory repo itself is not reachable.
- Your memory as it is now: the branch memory/main in that checkout.
Review the proposal (`git log -p memory/main..HEAD`, `git diff memory/main HEAD`): is it
accurate, durable, and in the right files? You may fix it with follow-up commits there
(no amend, no rebase); they are recorded as yours. Then decide:
- merge_proposal with a one-line summary: the harness checks the proposal and merges it
  into your memory. If it conflicts with newer memory, the result says so and memory/main
  is brought up to date: run `git merge memory/main`, resolve, commit, and call
  merge_proposal again (at most {MAX_MERGE_ATTEMPTS} calls);
- or decline_proposal with the reason.
Commit everything you want merged first. Do not ask questions: end with a short report of
what you merged, or why not."""
    if instructions:
        task += f"\n\n<merge_instructions>\n{instructions}\n</merge_instructions>"
    return task


async def integrate(
    *,
    provider: Provider,
    agent: AgentRecord,
    memory_dir: Path,
    worktree: Worktree,
    reflection_id: str,
    instructions: str,
    conversation_dir: Path,
    clock: Clock = utc_now,
    unsandboxed_bash: bool = False,
) -> FinalizeResult:
    """Run the agent's review of a landed proposal, then let git judge it (finalize)."""
    proposal = Proposal(
        dataclasses.replace(worktree, signature=agent_signature(agent, reflection_id))
    )
    run = await run_integration(
        provider=provider,
        agent=agent,
        memory_dir=memory_dir,
        proposal=proposal,
        reflection_id=reflection_id,
        instructions=instructions,
        conversation_dir=conversation_dir,
        clock=clock,
        unsandboxed_bash=unsandboxed_bash,
    )
    log.info("reflection_integration_finished", stop_reason=run.stop_reason)
    if proposal.merged_head is None and proposal.refused is not None:
        raise proposal.refused  # the job fails with it; the caller cleans up
    if proposal.declined is not None:
        detail = f"the agent declined the proposal: {proposal.declined}"
    else:
        detail = NOT_MERGED
        if run.error_message:
            detail += f" (its turn failed: {run.error_message})"
    return await asyncio.to_thread(
        finalize, worktree, should_merge=True, require_already_merged=True, failure_summary=detail
    )


async def run_integration(
    *,
    provider: Provider,
    agent: AgentRecord,
    memory_dir: Path,
    proposal: Proposal,
    reflection_id: str,
    instructions: str,
    conversation_dir: Path,
    clock: Clock = utc_now,
    unsandboxed_bash: bool = False,
) -> IntegrationRun:
    """The agent's integration turn over ``proposal``; no lock is held through it."""
    worktree = proposal.worktree
    conversation = Conversation.create(
        JobLayout(conversation_dir), agent.id, memory_head=None, clock=clock
    )
    view = integration_view(worktree)
    system = await asyncio.to_thread(_review_prompt, agent, memory_dir, worktree, view)

    async def system_prompt() -> str:
        return system

    identity = worktree.landing.signature
    turn = Turn(
        conversation=conversation,
        provider=provider,
        tools=[
            ReadFile(),
            EditFile(),
            IntegrationBash(),
            MergeProposal(proposal),
            DeclineProposal(proposal),
        ],
        tool_context=ToolContext(
            agent_id=agent.id,
            workspace=worktree.path,
            memory_dir=worktree.path,
            memory_edit=no_memory_edit,
            bash_unsandboxed=unsandboxed_bash,
            view=view,
            extra_env={
                "PROPOSAL_DIR": view.inside(worktree.path),
                "GIT_AUTHOR_NAME": identity.name,
                "GIT_AUTHOR_EMAIL": identity.email,
                "GIT_COMMITTER_NAME": identity.name,
                "GIT_COMMITTER_EMAIL": identity.email,
            },
        ),
        system_prompt=system_prompt,
        max_steps=MAX_STEPS,
        rules=ToolRules(terminal=frozenset({DeclineProposal.name})),
        purpose="integration",
    )
    task = integration_task(
        worktree=worktree, reflection_id=reflection_id, instructions=instructions
    )
    result = await run_turn(
        turn, [conversation.new_message(role="user", content=task, turn_id=turn.turn_id)]
    )
    return IntegrationRun(
        stop_reason=result.stop_reason,
        report=final_report(list(conversation.log)),
        error_message=(result.error or {}).get("message"),
        conversation_id=conversation.id,
    )


def _review_prompt(agent: AgentRecord, memory_dir: Path, worktree: Worktree, view: PathView) -> str:
    """The reviewing agent's system prompt; shows the clone memory as it is now."""
    with MemoryRepo(memory_dir) as repo:
        # Its memory files are in the proposal checkout (as proposed; memory/main as now).
        system = compile_system_prompt(
            agent.system_prompt, repo.read_tree(), view.inside(worktree.path)
        )
    if secure(worktree) is None:  # the clone is safe to run git in: show it memory now
        share_latest(memory_dir, worktree.path)
    return system
