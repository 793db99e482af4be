"""Explicit merge mode: the main agent itself reviews a reflection's proposal and merges it.

With ``merge: explicit`` the harness does not merge. It opens an integration conversation
in which the agent — its own model, its own memory in the prompt — gets the proposal
branch, reviews it, may add one follow-up commit, brings the latest memory into the
branch, resolves conflicts, and merges into its memory repo. Whatever the agent says, the
verdict is git's: the job then finalizes with ``require_already_merged``, so the proposal
counts as merged only if its branch is an ancestor of the memory's HEAD, and uncommitted
edits make it ``dirty_uncommitted``. The agent holds the memory lock while it works, so
no other memory writer interleaves with its merge.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from reflector.checkout import Worktree, collect
from reflector.subagent import JobLayout, final_report
from shared import sandbox
from shared.agent.loop import Turn, run_turn
from shared.agent.prompts import INTEGRATION_MARKER
from shared.agent.tools.base import ToolContext
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile, ReadFile
from shared.agent.tools.view import MEMORY, PROPOSAL, PathView, memory_name
from shared.clock import Clock, utc_now
from shared.memory import git
from shared.memory.compile import compile_system_prompt
from shared.memory.provenance import JOB_ID
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.providers.base import Provider
from shared.store.conversations import Conversation
from shared.store.locks import async_file_lock

MAX_STEPS = 20


class IntegrationRun(BaseModel):
    stop_reason: str
    report: str
    error_message: str | None = None
    conversation_id: str


def has_proposal(worktree: Worktree) -> bool:
    """Did the sub-agent leave commits or edits in its checkout (anything to review)?

    Brings its commits into the memory repo as ``worktree.branch`` (:func:`collect`), the
    branch the primary agent is told to merge."""
    if not collect(worktree):
        return False
    revs = f"{worktree.base_head}..{worktree.branch}"
    ahead = int(git.run(worktree.parent_dir, "rev-list", "--count", revs).stdout.strip() or 0)
    return ahead > 0 or bool(git.run(worktree.path, "status", "--porcelain").stdout.strip())


class IntegrationBash(Bash):
    """The primary agent's bash while it integrates: it merges, so besides the proposal
    checkout its whole memory repo is writable, ``.git`` included (the harness's own git
    ignores any hook or config it might leave there, :mod:`shared.memory.git`)."""

    def walls(self, ctx: ToolContext) -> sandbox.Walls:
        names = ctx.names()
        binds = tuple(
            sandbox.Bind(path, names.inside(path), writable=True)
            for path in (ctx.workspace, ctx.memory_dir)
        )
        return sandbox.Walls(cwd=names.inside(ctx.workspace), binds=binds)


def integration_view(worktree: Worktree, memory_dir: Path) -> PathView:
    """The integrating agent's names: the proposal at ``/proposal``, its memory at
    ``/memory`` (the host paths where bash runs bare)."""
    return PathView.of((PROPOSAL, worktree.path), (MEMORY, memory_dir))


def integration_task(
    *, worktree: Worktree, memory_dir: Path, reflection_id: str, instructions: str
) -> str:
    view = integration_view(worktree, memory_dir)
    proposal, memory_dir = view.inside(worktree.path), view.inside(memory_dir)
    merge = (
        f"git -C {memory_dir} merge --no-ff {worktree.branch} "
        f'-m "merge(reflection): <summary>" -m "{JOB_ID}: {worktree.job_id}"'
    )
    task = f"""{INTEGRATION_MARKER} Reflection integration (reflection {reflection_id})
A background reflection proposes memory changes for you to review before they land.
- Proposal checkout: {proposal} (branch {worktree.branch}, based on {worktree.base_head[:12]})
- Your memory repo: {memory_dir}
Review the proposal commits (`git -C {proposal} log -p {worktree.base_head}..HEAD`):
are they accurate, durable, and in the right files? You may add ONE follow-up commit in the
proposal checkout (no amend) with subject `merge(reflection): <summary>` and the trailer
`Reflection-Subagent-ID: {reflection_id}`, then bring it over with
`git -C {memory_dir} fetch --quiet {proposal} +HEAD:{worktree.branch}`. Then merge the
proposal into your memory repo:
`{merge}`;
if it conflicts, resolve it so both repos end clean, or run `git -C {memory_dir} merge --abort`.
If your memory repo has uncommitted changes that are not yours, stop and touch nothing.
Do not push, do not delete the checkout or the branch, and do not ask questions: report
what you merged, or why not."""
    if instructions:
        task += f"\n\n<merge_instructions>\n{instructions}\n</merge_instructions>"
    return task


async def run_integration(
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
) -> IntegrationRun:
    conversation = Conversation.create(
        JobLayout(conversation_dir), agent.id, memory_head=None, clock=clock
    )
    view = integration_view(worktree, memory_dir)
    with MemoryRepo(memory_dir) as repo:
        system = compile_system_prompt(
            agent.system_prompt, repo.read_tree(), memory_name(memory_dir)
        )
        lock_path = repo.lock_path

    async def system_prompt() -> str:
        return system

    turn = Turn(
        conversation=conversation,
        provider=provider,
        tools=[ReadFile(), EditFile(), IntegrationBash()],
        tool_context=ToolContext(
            agent_id=agent.id,
            workspace=worktree.path,
            memory_dir=memory_dir,
            bash_unsandboxed=unsandboxed_bash,
            view=view,
            extra_env={
                "PROPOSAL_DIR": view.inside(worktree.path),
                "PARENT_MEMORY_DIR": view.inside(memory_dir),
            },
        ),
        system_prompt=system_prompt,
        max_steps=MAX_STEPS,
        purpose="integration",
    )
    task = integration_task(
        worktree=worktree,
        memory_dir=memory_dir,
        reflection_id=reflection_id,
        instructions=instructions,
    )
    async with async_file_lock(lock_path):
        result = await run_turn(
            turn, [conversation.new_message(role="user", content=task, turn_id=turn.turn_id)]
        )
    return IntegrationRun(
        stop_reason=result.stop_reason,
        report=final_report(list(conversation.log)),
        error_message=(result.error or {}).get("message"),
        conversation_id=conversation.id,
    )
