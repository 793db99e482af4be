"""The socket's ``memory.*`` ops: a part of :class:`agentd.daemon.handlers.Handlers`, kept apart
so what the user can do to an agent's memory reads in one place (:mod:`agentd.daemon.ops` pairs
each op with its handler here).

Every write is a commit as the user, under the memory lock; the history ops
(:mod:`agentd.memory.history`), notes (:mod:`agentd.memory.notes`) and held proposals
(:mod:`agentd.memory.proposals`) live in their own modules.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from agentd.daemon import replies
from agentd.daemon.agents import Agents
from agentd.daemon.requests import (
    AgentTarget,
    MemoryAnswer,
    MemoryBlame,
    MemoryCommit,
    MemoryDiff,
    MemoryForget,
    MemoryLog,
    MemoryRead,
    MemoryRemember,
    MemoryRevert,
    MemoryShow,
    MemoryWhy,
    MemoryWrite,
)
from agentd.memory.edit import edit_by_hand, read_for_edit
from agentd.memory.history import MemoryHistory
from agentd.memory.notes import MemoryNotes
from agentd.memory.proposals import MemoryProposals
from shared.memory.provenance import USER_EMAIL, USER_NAME, user_trailers, with_trailers
from shared.models.events import Emit


class MemoryOps:
    agents: Agents
    history: MemoryHistory
    notes: MemoryNotes
    proposals: MemoryProposals

    async def memory_log(self, params: MemoryLog, _emit: Emit) -> replies.MemoryCommits:
        record = await self.agents.resolve(params.agent)
        commits = await asyncio.to_thread(self.agents.memory(record.id).log, params.limit)
        return replies.MemoryCommits(agent_id=record.id, commits=[asdict(c) for c in commits])

    async def memory_path(self, params: AgentTarget, _emit: Emit) -> replies.MemoryPath:
        record = await self.agents.resolve(params.agent)
        path = str(self.agents.memory(record.id).path)
        return replies.MemoryPath(agent_id=record.id, path=path)

    async def memory_show(self, params: MemoryShow, _emit: Emit) -> replies.MemoryShown:
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        if params.path is not None:
            text = await asyncio.to_thread(repo.show, params.path)
            return replies.MemoryShown(
                replies.MemoryFile(agent_id=record.id, path=params.path, text=text)
            )
        files = await asyncio.to_thread(repo.read_tree)
        return replies.MemoryShown(replies.MemoryFiles(agent_id=record.id, files=files))

    async def memory_commit(self, params: MemoryCommit, _emit: Emit) -> replies.MemoryCommitted:
        """Commit edits made by hand in the checkout (they hold reflection back: a merge
        never runs over uncommitted changes), under the memory lock, as the user."""
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        message = with_trailers(params.message, user_trailers())
        async with repo.edit(
            message, author_name=USER_NAME, author_email=USER_EMAIL, by="user"
        ) as change:
            pass
        committed = change.after if change.after != change.before else None
        return replies.MemoryCommitted(agent_id=record.id, commit=committed)

    async def memory_read(self, params: MemoryRead, _emit: Emit) -> replies.MemoryEditable:
        """A memory file to edit by hand: its committed text and blob (or a new file's
        frontmatter)."""
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        editable = await asyncio.to_thread(read_for_edit, repo, params.path)
        return replies.MemoryEditable(agent_id=record.id, **asdict(editable))

    async def memory_write(self, params: MemoryWrite, _emit: Emit) -> replies.MemoryWritten:
        """A file edited by hand, written and committed as the user under the memory lock;
        refused if it changed since :meth:`memory_read` (see :mod:`agentd.memory.edit`)."""
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        committed = await edit_by_hand(repo, params.path, params.text, params.base, params.message)
        return replies.MemoryWritten(agent_id=record.id, path=params.path, commit=committed)

    async def memory_blame(self, params: MemoryBlame, _emit: Emit) -> replies.Blamed:
        return await self.history.blame(params)

    async def memory_why(self, params: MemoryWhy, _emit: Emit) -> replies.WhyFound:
        return await self.history.why(params)

    async def memory_diff(self, params: MemoryDiff, _emit: Emit) -> replies.MemoryChanges:
        return await self.history.diff(params)

    async def memory_revert(self, params: MemoryRevert, _emit: Emit) -> replies.MemoryReverted:
        """Undo one memory commit as the user; every conversation's next turn is told."""
        return await self.history.revert(params)

    async def memory_remember(
        self, params: MemoryRemember, _emit: Emit
    ) -> replies.MemoryRemembered:
        """A note appended to a memory file as one commit (:mod:`agentd.memory.notes`)."""
        return await self.notes.remember(params)

    async def memory_forget(self, params: MemoryForget, _emit: Emit) -> replies.ForgetAnswer:
        """The memory lines containing a pattern; with ``confirm``, removed in one commit."""
        return await self.notes.forget(params)

    async def memory_proposals(self, params: AgentTarget, _emit: Emit) -> replies.HeldProposals:
        """The reflections held for the user (destructive ones), each with its diff."""
        return await self.proposals.list(params)

    async def memory_accept(self, params: MemoryAnswer, _emit: Emit) -> replies.ProposalAnswered:
        """Merge a held proposal into memory as the user; answered once."""
        return await self.proposals.accept(params)

    async def memory_reject(self, params: MemoryAnswer, _emit: Emit) -> replies.ProposalAnswered:
        """Drop a held proposal, memory untouched; answered once."""
        return await self.proposals.reject(params)
