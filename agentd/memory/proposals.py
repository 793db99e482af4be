"""Reflections held for the user, on the socket: ``memory.proposals``, ``memory.accept`` and
``memory.reject`` (``agentctl memory proposals|accept|reject``), and for the web view.

The worker holds a destructive reflection (:mod:`reflector.hold`); the daemon, the one
writer of memory, answers it: :mod:`shared.memory.proposal_answers` merges or drops it
under the memory lock, in a thread. The next turn of every conversation then carries
``<memory_update>`` for an accepted one, as for any other change of memory's HEAD.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentd.daemon.agents import Agents
from agentd.daemon.replies import HeldProposals, ProposalAnswered
from agentd.daemon.requests import AgentTarget, MemoryAnswer
from shared.memory.content import MemoryLimits
from shared.memory.proposal_answers import accept, reject
from shared.memory.proposals import Proposal, Proposals


class MemoryProposals:
    def __init__(self, agents: Agents, limits: MemoryLimits) -> None:
        self.agents = agents
        self.limits = limits

    def of(self, agent_id: str) -> Proposals:
        directory = self.agents.layout.reflection_files(agent_id).proposals
        return Proposals(self.agents.memory(agent_id), directory)

    async def list(self, params: AgentTarget) -> HeldProposals:
        record = await self.agents.resolve(params.agent)
        shown = await asyncio.to_thread(held_with_diffs, self.of(record.id))
        return HeldProposals(agent_id=record.id, agent=record.name, proposals=shown)

    async def accept(self, params: MemoryAnswer) -> ProposalAnswered:
        record = await self.agents.resolve(params.agent)
        proposals = self.of(record.id)
        answered = await asyncio.to_thread(
            accept, proposals, params.proposal, limits=self.limits, now=self.agents.clock()
        )
        return ProposalAnswered(agent_id=record.id, proposal=view(answered))

    async def reject(self, params: MemoryAnswer) -> ProposalAnswered:
        record = await self.agents.resolve(params.agent)
        proposals = self.of(record.id)
        answered = await asyncio.to_thread(
            reject, proposals, params.proposal, now=self.agents.clock()
        )
        return ProposalAnswered(agent_id=record.id, proposal=view(answered))


def held_with_diffs(proposals: Proposals) -> list[dict[str, Any]]:
    """Every held proposal with its patch, oldest first. Blocking (git)."""
    shown = []
    for proposal in proposals.held():
        patch, truncated = proposals.diff(proposal)
        shown.append({**view(proposal), "diff": patch, "truncated": truncated})
    return shown


def view(proposal: Proposal) -> dict[str, Any]:
    """A proposal as the socket and the web view show it."""
    destruction = proposal.destruction
    return {
        **proposal.model_dump(mode="json"),
        "reason": destruction.reason,
        "why": destruction.describe(),
        "diffstat": destruction.diffstat(),
    }
