"""How much of the agent's prompt its core memory may take, and whether a reflection fits.

Files under ``system/`` are compiled into every request the agent makes: with the base
prompt and the tool schemas they are the *floor* no compaction can shrink. Left alone, a
run of reflections that each add a line grows ``system/human.md`` until the floor passes
the compaction threshold and every turn fails with ``prompt_floor``. So core memory gets
half of the agent's threshold: the sub-agent is told the budget (the job carries it), and
a reflection whose branch would take the floor past it (and further than it already was)
is not merged.
"""

from __future__ import annotations

from pathlib import Path

from shared.agent.tools.registry import main_agent_tools
from shared.agent.tools.view import memory_name
from shared.context.budget import compaction_threshold
from shared.memory.compile import compile_system_prompt
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.providers.tokens import text_tokens, tools_tokens
from shared.reflection.job import MemoryBudget

SHARE_OF_THRESHOLD = 0.5


def budget_for(agent: AgentRecord, window: int, memory_dir: Path, rev: str) -> MemoryBudget:
    limit = int(compaction_threshold(window) * SHARE_OF_THRESHOLD)
    return MemoryBudget(limit_tokens=limit, floor_tokens=floor_at(agent, memory_dir, rev))


def floor_at(agent: AgentRecord, memory_dir: Path, rev: str) -> int:
    """The prompt floor the agent would pay with its memory at ``rev``."""
    with MemoryRepo(memory_dir) as repo:
        files = repo.read_tree(rev)
    system = compile_system_prompt(agent.system_prompt, files, memory_name(memory_dir))
    return text_tokens(system) + tools_tokens([tool.schema for tool in main_agent_tools()])


def over_budget(budget: MemoryBudget, floor_after: int) -> bool:
    """Past the limit and larger than before: a reflection that shrinks an already large
    memory is welcome, one that grows it past the limit is not."""
    return floor_after > budget.limit_tokens and floor_after > budget.floor_tokens
