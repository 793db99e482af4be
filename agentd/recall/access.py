"""Recall as an agent's tools see it: one agent's searches and reads around a message.

Kept apart from :mod:`agentd.recall.service` (the index, which needs numpy) so that the daemon,
whose recall runs in another process, never imports the index.
"""

from __future__ import annotations

from typing import Protocol

from shared.models.messages import Message
from shared.recall.ranking import Found, SearchRequest


class Recall(Protocol):
    """What answers an agent's recall: the service itself, or the daemon's link to the
    process it runs in (:class:`agentd.recall.client.RecallClient`)."""

    async def search(self, agent_id: str, request: SearchRequest) -> Found: ...

    async def around(
        self, agent_id: str, message_id: str, before: int, after: int
    ) -> list[Message]: ...


class AgentRecallAccess:
    """Recall for one agent's tools (the ``Recall`` protocol of ``ToolContext``)."""

    def __init__(self, service: Recall, agent_id: str) -> None:
        self.service = service
        self.agent_id = agent_id

    async def search(self, request: SearchRequest) -> Found:
        return await self.service.search(self.agent_id, request)

    async def around(self, message_id: str, before: int, after: int) -> list[Message]:
        return await self.service.around(self.agent_id, message_id, before, after)
