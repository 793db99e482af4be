"""One run of the reflection sub-agent: the chat loop, with the reflector's prompt and tools.

The sub-agent is an agent like any other, ``<parent>~reflection``, run by the same loop
with its own transcript kept under the job's ``conversation_dir``; the worker sends it
back with its answer, and the daemon keeps it (so a failed run can be read afterwards).
The loop ending is not the verdict: :func:`shared.reflection.verdict.judge` decides from
the transcript whether the run read the payload and reported, and how far it read (the
daemon judges again from the transcript it is sent).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from reflector.prompt import MemoryBudget, system_prompt, task_prompt
from reflector.tools import reflection_context, reflection_tools
from shared.agent.loop import Turn, run_turn
from shared.clock import Clock, utc_now
from shared.ids import REFLECTION_SUFFIX, validate_agent_id
from shared.models.messages import StopReason
from shared.providers.base import Provider
from shared.reflection.payload import PayloadFile
from shared.reflection.slices import Slice
from shared.reflection.verdict import Reason, final_report, judge
from shared.settings import DEFAULT_BASH_OUTPUT_CHARS
from shared.store.conversations import Conversation
from shared.store.layout import JobLayout

MAX_STEPS = 12


class SubagentRun(BaseModel):
    """What the launcher needs from a run: the verdict, the report, and where to look."""

    success: bool
    reason: Reason
    report: str
    """The text of the reply that ended the run ("" if it did not end on its own)."""
    consumed: list[Slice]
    """The unreflected slices cut to where the reading stopped (empty unless success)."""
    unread: list[str]
    """Conversations with unreflected messages this run leaves for the next one."""
    stop_reason: StopReason
    steps: int
    conversation_id: str
    """The sub-agent's transcript: ``<conversation_dir>/<conversation_id>/messages.jsonl``."""
    error_code: str | None = None
    """The error code when the run stopped on an error (``provider_config``, …)."""
    error_message: str | None = None


async def run_reflection_subagent(
    *,
    provider: Provider,
    checkout: Path,
    payload: PayloadFile,
    parent_agent_id: str,
    job_id: str,
    parent_snapshot: str,
    instruction: str | None,
    conversation_dir: Path,
    now: datetime,
    timezone_name: str,
    max_steps: int = MAX_STEPS,
    output_chars: int = DEFAULT_BASH_OUTPUT_CHARS,
    unsandboxed_bash: bool = False,
    memory_budget: MemoryBudget | None = None,
    clock: Clock = utc_now,
) -> SubagentRun:
    """Run the sub-agent on ``payload`` in the job's private clone at ``checkout``."""
    child_id = validate_agent_id(
        f"{validate_agent_id(parent_agent_id)}{REFLECTION_SUFFIX}", allow_reflection=True
    )
    conversation = Conversation.create(
        JobLayout(conversation_dir), child_id, memory_head=None, clock=clock
    )
    system = system_prompt(now=now, timezone_name=timezone_name)
    task = task_prompt(
        is_manifest=payload.is_manifest,
        instruction=instruction,
        parent_snapshot=parent_snapshot,
        job_id=job_id,
        first_id=payload.slices[0].slice.start_id,
        last_id=payload.slices[-1].slice.end_id,
        memory_budget=memory_budget,
        child_id=child_id,
        parent_id=parent_agent_id,
    )

    async def fixed_system_prompt() -> str:
        return system

    turn = Turn(
        conversation=conversation,
        provider=provider,
        tools=reflection_tools(payload),
        tool_context=reflection_context(
            worktree=checkout,
            payload_path=payload.path,
            parent_agent_id=parent_agent_id,
            output_chars=output_chars,
            unsandboxed_bash=unsandboxed_bash,
        ),
        system_prompt=fixed_system_prompt,
        max_steps=max_steps,
    )
    result = await run_turn(
        turn, [conversation.new_message(role="user", content=task, turn_id=turn.turn_id)]
    )
    messages = list(conversation.log)
    report = final_report(messages)
    verdict = judge(messages, payload, report)
    return SubagentRun(
        success=verdict.success,
        reason=verdict.reason,
        report=report,
        consumed=verdict.consumed,
        unread=verdict.unread,
        stop_reason=result.stop_reason,
        steps=result.steps,
        conversation_id=conversation.id,
        error_code=(result.error or {}).get("code"),
        error_message=(result.error or {}).get("message"),
    )
