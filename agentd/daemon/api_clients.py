"""Which conversation a client of the OpenAI-compatible endpoint talks in.

A client names one with the ``X-Agentd-Conversation`` header: a conversation id of the
agent, or ``default`` for the agent's default conversation (the one ``agentctl chat``
uses). Without it, each client gets a conversation of its own, made on its first request
and kept after: a client is its API key's name, and the request's ``user`` field when it
sends one (apps that serve several people send it), so two apps, or two people of one
app, never land in each other's conversation. The map is the agent's
``api-clients.json``; a conversation deleted since is replaced by a new one.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from agentd.daemon.agents import Agents
from shared.errors import UnknownConversation
from shared.models.agents import AgentRecord
from shared.store.atomic import read_model, write_model_atomic
from shared.store.conversations import Conversation

DEFAULT = "default"
"""The header's word for the agent's default conversation."""


class ApiClientsFile(BaseModel):
    schema_version: Literal[1] = 1
    clients: dict[str, str] = Field(default_factory=dict)
    """Client (``KEY_NAME`` or ``KEY_NAME/user``) → conversation id."""


class ApiConversations:
    def __init__(self, agents: Agents) -> None:
        self.agents = agents
        self._locks: dict[str, asyncio.Lock] = {}

    async def find(
        self, record: AgentRecord, key_name: str, user: str | None, named: str | None
    ) -> Conversation:
        """The conversation the header ``named``, else the client's own."""
        if named is not None:
            return self.agents.conversation(record, None if named == DEFAULT else named)
        client = key_name if user is None else f"{key_name}/{user}"
        lock = self._locks.setdefault(record.id, asyncio.Lock())
        async with lock:  # two first requests of one client make one conversation
            path = self.agents.layout.agent_files(record.id).api_clients
            known = await asyncio.to_thread(read_model, path, ApiClientsFile) or ApiClientsFile()
            conversation_id = known.clients.get(client)
            if conversation_id is not None:
                try:
                    return self.agents.conversation(record, conversation_id)
                except UnknownConversation:  # deleted since: the client starts a new one
                    pass
            conversation = self.agents.new_conversation(record)
            clients = {**known.clients, client: conversation.id}
            await asyncio.to_thread(write_model_atomic, path, ApiClientsFile(clients=clients))
            return conversation
