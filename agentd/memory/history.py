"""Memory's history on the socket: ``memory.blame``, ``memory.why``, ``memory.diff`` and
``memory.revert`` (``agentctl memory blame|why|diff|revert``).

Git does the history (:mod:`shared.memory.provenance`, :mod:`shared.memory.revert`, in
threads); this adds what only the daemon knows: the messages a commit came from.

``why`` shows, for each memory line matching the text, the commit that wrote it and its
evidence. For a reflection: the user messages inside the range it reflected on
(``Reflected-Messages: A..B``) that best match the line, found by recall with the line as
the query, keeping hits whose id falls in ``A..B`` (message ids sort in creation order).
For a turn's edit: the user message of the turn whose tool call made it.

``diff`` without a revision starts where the conversation's previous turn ended (the
memory commit it last saw, ``memory_head_seen``): what changed since, which is what its
next turn's ``<memory_update>`` will name. Before its first turn, that is where memory was
when the conversation was created.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import structlog

from agentd.daemon.agents import Agents
from agentd.daemon.replies import Blamed, MemoryChanges, MemoryReverted, WhyFound
from agentd.daemon.requests import MemoryBlame, MemoryDiff, MemoryRevert, MemoryWhy
from agentd.recall.client import RecallClient
from shared.errors import UnknownMessage, UnknownRevision
from shared.memory import git
from shared.memory.provenance import (
    CommitProvenance,
    FoundLine,
    blame,
    commits_between,
    find_lines,
    resolve_commit,
)
from shared.memory.repo import MemoryRepo
from shared.memory.revert import revert
from shared.recall.ranking import SearchRequest

log = structlog.get_logger(__name__)

EVIDENCE_LIMIT = 3
"""User messages shown as a reflection's evidence for one line."""
SEARCH_LIMIT = 1_000
"""Hits asked of recall before keeping those in a reflection's range: generous, since the
best matches overall may lie outside it."""
TURN_LOOKBACK = 200
"""Messages looked back from a tool call for the user message that started its turn."""
MAX_QUERY_CHARS = 2_000
MAX_DIFF_CHARS = 500_000


class MemoryHistory:
    def __init__(self, agents: Agents, recall: RecallClient) -> None:
        self.agents = agents
        self.recall = recall

    async def blame(self, params: MemoryBlame) -> Blamed:
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        lines = await asyncio.to_thread(blame, repo, params.path, params.rev)
        return Blamed(
            agent_id=record.id,
            path=params.path,
            lines=[line.model_dump(mode="json") for line in lines],
        )

    async def why(self, params: MemoryWhy) -> WhyFound:
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        found = await asyncio.to_thread(find_lines, repo, params.text)
        incomplete: str | None = None
        matches = []
        for line in found[: params.limit]:
            evidence, note = await self._evidence(record.id, line)
            incomplete = incomplete or note
            matches.append(
                {
                    "path": line.path,
                    **line.line.model_dump(mode="json"),
                    "evidence": evidence,
                }
            )
        return WhyFound(
            agent_id=record.id,
            matches=matches,
            more=max(0, len(found) - params.limit),
            incomplete=incomplete,
        )

    async def diff(self, params: MemoryDiff) -> MemoryChanges:
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        base = params.rev
        if base is None:
            conversation = self.agents.conversation(record, params.conversation)
            base = conversation.record.memory_head_seen
            if base is None:
                raise UnknownRevision(
                    f"conversation {conversation.id} does not record which memory it last saw; "
                    "name a revision, e.g. `agentctl memory diff HEAD~1`"
                )
        changes = await asyncio.to_thread(_diff, repo, base)
        return MemoryChanges.model_validate({"agent_id": record.id, **changes})

    async def revert(self, params: MemoryRevert) -> MemoryReverted:
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        done = await asyncio.to_thread(revert, repo, params.commit)
        log.info(
            "memory_reverted",
            agent_id=record.id,
            reverted=done.reverted.sha,
            commit=done.commit.sha if done.commit else None,
        )
        return MemoryReverted(agent_id=record.id, **done.model_dump(mode="json"))

    async def _evidence(
        self, agent_id: str, line: FoundLine
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The messages behind ``line``'s commit, and why the list may be partial."""
        provenance = line.line.commit.provenance
        if provenance.kind == "turn" and provenance.message_id:
            return await self._turn_evidence(agent_id, provenance.message_id), None
        first, last = provenance.reflected_first, provenance.reflected_last
        if provenance.kind != "reflection" or first is None or last is None:
            return [], None
        request = SearchRequest(
            query=line.line.text[:MAX_QUERY_CHARS] or line.line.text,
            role="user",
            limit=SEARCH_LIMIT,
        )
        found = await self.recall.search(agent_id, request)
        inside = [hit for hit in found.hits if first <= hit.message_id <= last]
        return [
            _said(hit.message_id, hit.conversation_id, _iso(hit.created_at), hit.text, hit.score)
            for hit in inside[:EVIDENCE_LIMIT]
        ], found.incomplete

    async def _turn_evidence(self, agent_id: str, message_id: str) -> list[dict[str, Any]]:
        """The user message that started the turn of tool-call message ``message_id``."""
        try:
            around = await self.recall.around(agent_id, message_id, TURN_LOOKBACK, 0)
        except UnknownMessage:
            return []  # its conversation was deleted
        calling = next((m for m in around if m.id == message_id), None)
        turn_id = getattr(calling, "turn_id", None)
        said = [
            m
            for m in around
            if m.role == "user" and m.kind == "message" and getattr(m, "turn_id", None) == turn_id
        ]
        if turn_id is None or not said:
            return []
        message = said[-1].to_api()
        return [
            _said(
                message["id"], message["conversation_id"], message["created_at"], said[-1].content
            )
        ]


def _diff(repo: MemoryRepo, rev: str) -> dict[str, Any]:
    """What changed in memory from ``rev`` to HEAD: the commits and the patch. Blocking."""
    base = resolve_commit(repo, rev)
    head = repo.head()
    commits: list[CommitProvenance] = commits_between(repo, base, head)
    patch = git.run(
        repo.path, "diff", "--no-color", "--no-ext-diff", "--no-textconv", base, head
    ).stdout
    return {
        "from": base,
        "to": head,
        "commits": [commit.model_dump(mode="json") for commit in commits],
        "diff": patch[:MAX_DIFF_CHARS],
        "truncated": len(patch) > MAX_DIFF_CHARS,
    }


def _said(
    message_id: str, conversation_id: str, created_at: str, text: str, score: float | None = None
) -> dict[str, Any]:
    """One message of evidence; ``score`` is recall's, for a reflection's."""
    return {
        "message_id": message_id,
        "conversation_id": conversation_id,
        "created_at": created_at,
        "text": text,
        "score": None if score is None else round(score, 4),
    }


def _iso(timestamp: float) -> str:
    """A POSIX time as the API writes times: ISO 8601 in UTC with ``Z``."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
