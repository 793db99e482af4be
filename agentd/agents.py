"""The daemon's agents: records, memory repos and open conversations, created on demand.

A process keeps each opened conversation (its context window in memory) and each memory
repo for its lifetime; both are cheap, and reopening a conversation would re-read its
window from disk on every turn.
"""

from __future__ import annotations

import asyncio
import shutil

import structlog

from agentd.requests import AgentCreate, AgentUpdate
from shared.agent.prompts import BASE_SYSTEM_PROMPT, DEFAULT_HUMAN, DEFAULT_PERSONA
from shared.clock import Clock, utc_now
from shared.errors import AgentdError, UnknownAgent
from shared.ids import new_id
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.store.agents import AgentStore
from shared.store.conversations import AppendListener, Conversation, list_conversations
from shared.store.layout import Layout
from shared.store.locks import file_lock

log = structlog.get_logger(__name__)

DEFAULT_AGENT_NAME = "default"


class Agents:
    def __init__(
        self,
        layout: Layout,
        *,
        on_append: AppendListener | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.layout = layout
        self.clock = clock
        self._on_append = on_append
        self.store = AgentStore(layout)
        self._memory: dict[str, MemoryRepo] = {}
        self._conversations: dict[tuple[str, str], Conversation] = {}
        self._create_lock = asyncio.Lock()

    async def create(self, params: AgentCreate) -> AgentRecord:
        async with self._create_lock:
            self.store.ensure_name_free(params.name)
            return await asyncio.to_thread(self._create_sync, params)

    def _create_sync(self, params: AgentCreate) -> AgentRecord:
        record = AgentRecord(
            id=new_id("agent"),
            name=params.name,
            model=params.model,
            system_prompt=params.system_prompt or BASE_SYSTEM_PROMPT,
            context_window=params.context_window,
        )
        directory = self.layout.agent_dir(record.id)
        directory.mkdir(parents=True)
        try:
            self.layout.workspace_dir(record.id).mkdir()
            self.layout.conversations_dir(record.id).mkdir()
            repo = MemoryRepo.create(
                self.layout.memory_dir(record.id),
                agent_id=record.id,
                agent_name=record.name,
                persona=DEFAULT_PERSONA if params.persona is None else params.persona,
                human=DEFAULT_HUMAN if params.human is None else params.human,
            )
            self._memory[record.id] = repo
            conversation = Conversation.create(
                self.layout, record.id, memory_head=repo.head(), clock=self.clock
            )
            self._remember(conversation)
            record.default_conversation_id = conversation.id
            self.store.save(record)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        log.info("agent_created", agent_id=record.id, name=record.name)
        return record

    async def resolve(self, ref: str | None) -> AgentRecord:
        """An agent by id or name; ``None`` is the default agent, created on first use."""
        if ref is not None:
            return self.store.find(ref)
        try:
            return self.store.find(DEFAULT_AGENT_NAME)
        except UnknownAgent:
            async with self._create_lock:
                try:
                    return self.store.find(DEFAULT_AGENT_NAME)
                except UnknownAgent:
                    params = AgentCreate(name=DEFAULT_AGENT_NAME)
                    return await asyncio.to_thread(self._create_sync, params)

    def update(self, record: AgentRecord, params: AgentUpdate) -> AgentRecord:
        if params.name is not None and params.name != record.name:
            self.store.ensure_name_free(params.name, except_id=record.id)
            record.name = params.name
        for field in ("model", "system_prompt", "context_window"):
            value = getattr(params, field)
            if value is not None:
                setattr(record, field, value)
        self.store.save(record)
        log.info("agent_updated", agent_id=record.id)
        return record

    def memory(self, agent_id: str) -> MemoryRepo:
        repo = self._memory.get(agent_id)
        if repo is None:
            repo = self._memory[agent_id] = MemoryRepo(self.layout.memory_dir(agent_id))
        return repo

    def conversation(self, record: AgentRecord, conversation_id: str | None) -> Conversation:
        """An open conversation; ``None`` is the agent's default one, created if missing."""
        if conversation_id is None:
            if record.default_conversation_id is None:
                conversation = self.new_conversation(record)
                record.default_conversation_id = conversation.id
                self.store.save(record)
                return conversation
            conversation_id = record.default_conversation_id
        conversation = self._conversations.get((record.id, conversation_id))
        if conversation is None:
            conversation = self._remember(
                Conversation.open(self.layout, record.id, conversation_id, clock=self.clock)
            )
        return conversation

    def new_conversation(self, record: AgentRecord) -> Conversation:
        conversation = Conversation.create(
            self.layout, record.id, memory_head=self.memory(record.id).head(), clock=self.clock
        )
        return self._remember(conversation)

    def _remember(self, conversation: Conversation) -> Conversation:
        if self._on_append is not None:
            conversation.listeners.append(self._on_append)
        self._conversations[(conversation.agent_id, conversation.id)] = conversation
        return conversation

    def conversations(self, record: AgentRecord) -> list[dict[str, object]]:
        return [
            {**c.model_dump(mode="json"), "default": c.id == record.default_conversation_id}
            for c in list_conversations(self.layout, record.id)
        ]

    def recover_memory(self) -> None:
        """Undo what a crash left in memory repos (an unfinished merge would otherwise be
        committed, conflict markers and all, by the next memory edit)."""
        for record in self.store.list():
            repo = self.memory(record.id)
            try:
                with file_lock(repo.lock_path, timeout_s=5):
                    repo.recover()
            except AgentdError as exc:
                log.warning("memory_recovery_skipped", agent_id=record.id, error=exc.message)

    def close(self) -> None:
        for repo in self._memory.values():
            repo.close()
        self._memory.clear()
