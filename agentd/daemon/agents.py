"""The daemon's agents: records, memory repos and open conversations, created on demand.

A process keeps each opened conversation (its context window in memory) and each memory
repo for its lifetime; both are cheap, and reopening a conversation would re-read its
window from disk on every turn.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from pathlib import Path

import structlog

from agentd.daemon.requests import AgentCreate, AgentUpdate
from shared.agent.prompts import DEFAULT_HUMAN, DEFAULT_PERSONA
from shared.agent.tools.registry import tools_named
from shared.clock import Clock, utc_now
from shared.errors import (
    AgentdError,
    AgentExists,
    MemoryDamaged,
    MemoryRepoError,
    UnknownAgent,
)
from shared.ids import new_id
from shared.memory import git
from shared.memory.content import MemoryLimits
from shared.memory.repo import MemoryRepo
from shared.models.agents import BASE_SYSTEM_PROMPT, AgentRecord
from shared.setting_choices import DEFAULT_MODEL
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
        memory_limits: MemoryLimits | None = None,
    ) -> None:
        self.layout = layout
        self.memory_limits = memory_limits or MemoryLimits()
        """What the agent's memory commits keep to (``AGENTD_MEMORY_*_MAX_BYTES``)."""
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
            model=None if params.model == DEFAULT_MODEL else params.model,
            system_prompt=params.system_prompt or BASE_SYSTEM_PROMPT,
            context_window=params.context_window,
        )
        with self.store.creating(record.id):
            self.layout.workspace_dir(record.id).mkdir()
            self.layout.conversations_dir(record.id).mkdir()
            repo = MemoryRepo.create(
                self.layout.memory_dir(record.id),
                agent_id=record.id,
                agent_name=record.name,
                persona=DEFAULT_PERSONA if params.persona is None else params.persona,
                human=DEFAULT_HUMAN if params.human is None else params.human,
                limits=self.memory_limits,
            )
            self._memory[record.id] = repo
            conversation = Conversation.create(
                self.layout, record.id, memory_head=repo.head(), clock=self.clock
            )
            self._remember(conversation)
            record.default_conversation_id = conversation.id
            self.store.save(record)
        log.info("agent_created", agent_id=record.id, name=record.name)
        return record

    async def resolve(self, ref: str | None) -> AgentRecord:
        """An agent by id or name; ``None`` is the default agent, created on first use.

        Never created while some agent's record is damaged or missing: the default agent
        may be that one (see :meth:`AgentStore.find`)."""
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
        """Apply ``params``; nothing is changed if any of them is refused."""
        tools = None
        if params.requires_approval is not None:
            tools = tools_named(params.requires_approval)
        if params.name is not None and params.name != record.name:
            self.store.ensure_name_free(params.name, except_id=record.id)
            record.name = params.name
        if params.model is not None:
            record.model = None if params.model == DEFAULT_MODEL else params.model
        for field in ("system_prompt", "context_window"):
            value = getattr(params, field)
            if value is not None:
                setattr(record, field, value)
        if tools is not None:
            record.requires_approval = tools
        self.store.save(record)
        log.info("agent_updated", agent_id=record.id)
        return record

    def memory(self, agent_id: str) -> MemoryRepo:
        """The agent's memory repo, kept open for the process's lifetime.

        A damaged repo (its ``.git`` gone) raises :class:`MemoryDamaged` saying how to mend
        it, for this agent only. It is looked at again on every call (one ``stat``), so a
        repo restored as told is used without a restart.
        """
        repo = self._memory.get(agent_id)
        if repo is not None and not (repo.path / ".git").is_dir():
            del self._memory[agent_id]
            repo.close()
            repo = None
        if repo is None:
            repo = open_memory(agent_id, self.layout.memory_dir(agent_id), self.memory_limits)
            self._memory[agent_id] = repo
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
        known = self._conversations.get((record.id, conversation_id))
        if known is not None:
            return known
        return self._remember(
            Conversation.open(self.layout, record.id, conversation_id, clock=self.clock)
        )

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

    async def adopt(self, built: Path, record: AgentRecord) -> None:
        """Move an agent directory built under the home (an import) into ``agents/``,
        with its name and id checked under the lock creating an agent takes."""
        async with self._create_lock:
            self.store.ensure_name_free(record.name)
            target = self.layout.agent_dir(record.id)
            if target.exists():
                raise AgentExists(f"an agent with id {record.id} exists already")
            self.layout.agents_dir.mkdir(parents=True, exist_ok=True)
            os.rename(built, target)

    def forget(self, agent_id: str, conversation_id: str | None = None) -> None:
        """Let go of what is kept open of a deleted agent, or of one of its conversations."""
        if conversation_id is not None:
            self._conversations.pop((agent_id, conversation_id), None)
            return
        repo = self._memory.pop(agent_id, None)
        if repo is not None:
            repo.close()
        for key in [key for key in self._conversations if key[0] == agent_id]:
            del self._conversations[key]

    def recover_memory(self) -> None:
        """Undo what a crash left in memory repos (an unfinished merge would otherwise be
        committed, conflict markers and all, by the next memory edit), and pin each repo's
        ``.git/config`` and attributes (:func:`shared.memory.git.pin`; every git command
        does, this makes ``agentd doctor`` see them in place from the start)."""
        for record in self.store.list():
            try:
                repo = self.memory(record.id)
                with file_lock(repo.lock_path, timeout_s=5):
                    git.pin(repo.path)
                    repo.recover()
            except MemoryDamaged as exc:
                log.error(
                    "memory_repo_damaged",
                    agent_id=record.id,
                    path=exc.path,
                    reason=exc.reason,
                    fix=exc.fix,
                )
            except AgentdError as exc:
                log.warning("memory_recovery_skipped", agent_id=record.id, error=exc.message)

    def close(self) -> None:
        for repo in self._memory.values():
            repo.close()
        self._memory.clear()


def open_memory(agent_id: str, path: Path, limits: MemoryLimits | None = None) -> MemoryRepo:
    """The memory repo at ``path``; :class:`MemoryDamaged`, with how to mend it, when it is
    not a usable git repo (a missing ``.git`` would otherwise stop the whole daemon)."""
    try:
        return MemoryRepo(path, limits=limits)
    except MemoryRepoError as exc:
        if not path.is_dir():
            raise MemoryDamaged(
                path, "the directory is missing", "Restore it from a backup"
            ) from exc
        reason = (
            "no .git directory"
            if not (path / ".git").is_dir()
            else f"git does not recognise it: {exc}"
        )
        here = shlex.quote(str(path))
        restart = (
            f"cd {here} && git init -q -b main && git config user.name {agent_id} && "
            f"git config user.email {agent_id}@agentd.local && git add -A && "
            'git commit -qm "memory restored"'
        )
        fix = (
            "Restore it from a backup, or keep the files that are there and start a new "
            f"history: {restart}. Other agents are not affected"
        )
        if (path / ".git").exists():
            fix = f"Move {path / '.git'} aside first. {fix}"
        raise MemoryDamaged(path, reason, fix) from exc
