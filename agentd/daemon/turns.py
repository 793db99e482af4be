"""Chat turns in the daemon: one at a time per conversation, many conversations at once.

Around the shared agent loop this adds what only the daemon knows: the per-conversation
lock (a second request waits its turn and is told so), the ``<memory_update>`` reminder
when the memory HEAD moved since the conversation last looked, the compiled system
prompt (cached per memory commit, so an unchanged memory costs no git call), the
agent's learned token ratio around its provider, the retries of a model call announced
to the client as they happen, and the ids bound to every log line of the turn.

A conversation whose turn waits for the user's approval (:mod:`shared.agent.approval_step`)
takes no new message: :class:`~shared.errors.ApprovalPending` names the waiting call and
how to answer it. The answer carries the same turn on (:meth:`Turns.resume`), under the
same lock, with the same tools and prompts as the turn that stopped.

A model whose context window nobody described (not in litellm's model map, no setting)
runs on a guessed default; the first turn of each agent on it after the daemon started
says so, once: a warning on every turn would be noise, and one per daemon start reaches
whoever changed the configuration without keeping state that outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import structlog

from agentd.recall.client import RecallClient
from shared.agent.approval_step import still_waiting
from shared.agent.loop import Turn, resume_turn, run_turn
from shared.agent.request import shape_messages
from shared.agent.rules import ToolRules
from shared.agent.tools.base import MemoryEdit, ToolContext
from shared.agent.tools.registry import agent_shell, main_agent_tools
from shared.agent.tools.view import memory_name
from shared.context.budget import Budget, comfortable_window, cramped_room, measure
from shared.context.calibration import CalibratedProvider, TokenRatioStore
from shared.errors import AlreadyAnswered, ApprovalPending
from shared.ids import new_id
from shared.memory.changes import memory_update_reminder
from shared.memory.compile import compile_system_prompt
from shared.memory.provenance import turn_trailers, with_trailers
from shared.memory.repo import Edit, MemoryRepo
from shared.memory.signing import one_line
from shared.models.agents import AgentRecord
from shared.models.events import Emit, MemoryUpdate, ProviderRetry, Waiting, WarningEvent
from shared.models.messages import Message
from shared.models.turns import TurnResult
from shared.providers.base import GLOBAL_WINDOW_SETTING, ModelRequest, Provider
from shared.providers.factory import ProviderFactory
from shared.providers.retry_notices import RetryNotice, retries_announced_to
from shared.settings import Settings
from shared.store.approvals import unfinished_step
from shared.store.conversations import Conversation
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


@dataclass
class _SeenHead:
    """The memory commit a conversation has seen; its own edits move it along."""

    sha: str


class PromptCache:
    """Compiled system prompts keyed by (memory commit, base prompt)."""

    def __init__(self, max_entries: int = 256) -> None:
        self._entries: dict[tuple[str, str, str], str] = {}
        self._max_entries = max_entries

    async def get(self, agent: AgentRecord, repo: MemoryRepo, head: str | None = None) -> str:
        """The prompt for memory at ``head`` (read now when not given)."""
        head = head or repo.head()
        base_hash = hashlib.sha256(agent.system_prompt.encode()).hexdigest()
        key = (agent.id, head, base_hash)
        prompt = self._entries.get(key)
        if prompt is None:
            files = await asyncio.to_thread(repo.read_tree, head)
            prompt = compile_system_prompt(agent.system_prompt, files, memory_name(repo.path))
            if len(self._entries) >= self._max_entries:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = prompt
        return prompt


class _StepPrompts:
    """The system prompt before each step of one turn: memory as it is at that moment, so
    an edit made by a step's tool shows in the next step.

    The first step uses the HEAD the turn read as it started, a moment before: reading
    ``.git`` is system calls on the event loop, and most turns are a single step."""

    def __init__(
        self, prompts: PromptCache, agent: AgentRecord, repo: MemoryRepo, first_head: str
    ) -> None:
        self.prompts = prompts
        self.agent = agent
        self.repo = repo
        self._first_head: str | None = first_head

    async def __call__(self) -> str:
        head, self._first_head = self._first_head, None
        return await self.prompts.get(self.agent, self.repo, head)


class Turns:
    def __init__(
        self, settings: Settings, layout: Layout, providers: ProviderFactory, recall: RecallClient
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.providers = providers
        self.recall = recall
        self.shell = agent_shell(
            unsandboxed_allowed=settings.unsandboxed_bash, network=settings.tool_network
        )
        self.shell.log()
        self.tools = main_agent_tools(with_bash=self.shell.offered)
        self.prompts = PromptCache()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._token_ratios: dict[str, TokenRatioStore] = {}
        self._warned_default_window: set[tuple[str, str]] = set()
        self._warned_cramped_window: set[tuple[str, str, int]] = set()
        """(agent, model, window) triples already told their window leaves little room."""
        self._window_room_checked: dict[tuple[str, str, int], tuple[str, float]] = {}
        """Per (agent, model, window), the (memory commit, token ratio) last measured: the
        floor moves only with them, so a turn measures it again only when one has."""
        """(agent, model) pairs already told their window is a guess."""
        self.active = 0

    def running(self, agent_id: str) -> list[str]:
        """The conversations of ``agent_id`` with a turn running (or waiting to run)."""
        return sorted(c for (a, c), lock in self._locks.items() if a == agent_id and lock.locked())

    async def chat(
        self,
        agent: AgentRecord,
        repo: MemoryRepo,
        conversation: Conversation,
        text: str,
        emit: Emit,
    ) -> TurnResult:
        async with self._turn_lock(agent, conversation, emit):
            turn_id = new_id("turn")
            with self._running(agent, conversation, turn_id, emit):
                step = await asyncio.to_thread(unfinished_step, conversation.directory)
                if step is not None:
                    raise ApprovalPending(still_waiting(agent.name, step))
                return await self._run(agent, repo, conversation, text, emit, turn_id)

    async def resume(
        self, agent: AgentRecord, repo: MemoryRepo, conversation: Conversation, emit: Emit
    ) -> TurnResult:
        """Carry out the conversation's answered step and go on with its turn."""
        async with self._turn_lock(agent, conversation, emit):
            step = await asyncio.to_thread(unfinished_step, conversation.directory)
            if step is None or not step.answered:
                raise AlreadyAnswered("the waiting step was carried out already")
            with self._running(agent, conversation, step.turn_id, emit):
                provider = await self._provider(agent)
                head = repo.head()
                # Not told of memory's changes while it waited: the next chat turn is.
                seen_head = _SeenHead(conversation.record.memory_head_seen or head)
                turn = await self._turn(
                    agent, repo, conversation, provider, seen_head, emit, step.turn_id, head
                )
                result = await resume_turn(turn, step)
                self._saw(conversation, seen_head)
                log.info("turn_resumed", stop_reason=result.stop_reason, steps=result.steps)
                return result

    @contextlib.asynccontextmanager
    async def _turn_lock(
        self, agent: AgentRecord, conversation: Conversation, emit: Emit
    ) -> AsyncIterator[None]:
        """One turn at a time per conversation; a second is told it waits."""
        lock = self._locks.setdefault((agent.id, conversation.id), asyncio.Lock())
        if lock.locked():
            await emit(Waiting(reason="another turn of this conversation is running"))
        async with lock:
            yield

    @contextlib.contextmanager
    def _running(
        self, agent: AgentRecord, conversation: Conversation, turn_id: str, emit: Emit
    ) -> Iterator[None]:
        """The ids on every log line of the turn, the active count, retries announced."""
        with structlog.contextvars.bound_contextvars(
            agent_id=agent.id, conversation_id=conversation.id, turn_id=turn_id
        ):
            self.active += 1
            try:
                with retries_announced_to(_retry_announcer(emit)):
                    yield
            finally:
                self.active -= 1

    async def _run(
        self,
        agent: AgentRecord,
        repo: MemoryRepo,
        conversation: Conversation,
        text: str,
        emit: Emit,
        turn_id: str,
    ) -> TurnResult:
        started = asyncio.get_running_loop().time()
        head = repo.head()
        inputs: list[Message] = []
        seen = conversation.record.memory_head_seen
        if seen is not None and seen != head:
            files = await asyncio.to_thread(repo.changed_files, seen, head)
            inputs.append(
                conversation.new_message(
                    role="user",
                    kind="reminder",
                    content=memory_update_reminder(seen, head, files),
                    turn_id=turn_id,
                )
            )
            await emit(MemoryUpdate.model_validate({"from": seen, "to": head, "files": files}))
        inputs.append(conversation.new_message(role="user", content=text, turn_id=turn_id))
        seen_head = _SeenHead(head)
        provider = await self._provider(agent)
        await self._warn_if_window_guessed(agent, provider, emit)
        await self._warn_if_window_cramped(agent, repo, head, provider, emit)
        turn = await self._turn(agent, repo, conversation, provider, seen_head, emit, turn_id, head)
        result = await run_turn(turn, inputs)
        self._saw(conversation, seen_head)
        log.info(
            "turn_finished",
            stop_reason=result.stop_reason,
            steps=result.steps,
            duration_ms=round((asyncio.get_running_loop().time() - started) * 1000, 1),
        )
        return result

    async def _turn(
        self,
        agent: AgentRecord,
        repo: MemoryRepo,
        conversation: Conversation,
        provider: Provider,
        seen_head: _SeenHead,
        emit: Emit,
        turn_id: str,
        head: str,
    ) -> Turn:
        """The turn's tools, prompts (its first step's compiled at ``head``), limits and
        rules (the agent's tools needing a yes)."""
        return Turn(
            conversation=conversation,
            provider=provider,
            tools=self.tools,
            tool_context=ToolContext(
                agent_id=agent.id,
                workspace=self.layout.workspace_dir(agent.id),
                memory_dir=repo.path,
                bash_timeout_s=self.settings.bash_timeout_s,
                bash_output_chars=self.settings.bash_output_chars,
                bash_network=self.settings.tool_network,
                bash_unsandboxed=self.settings.unsandboxed_bash,
                memory_edit=_memory_edit(agent, repo, conversation, seen_head),
                memory_limits=repo.limits,
                conversation_id=conversation.id,
                recall=self.recall.bind(agent.id),
            ),
            system_prompt=_StepPrompts(self.prompts, agent, repo, first_head=head),
            max_steps=self.settings.max_steps,
            summariser=await self._summariser(),
            rules=ToolRules(requires_approval=frozenset(agent.requires_approval)),
            emit=emit,
            turn_id=turn_id,
            stream=True,
        )

    @staticmethod
    def _saw(conversation: Conversation, seen_head: _SeenHead) -> None:
        if conversation.record.memory_head_seen != seen_head.sha:
            conversation.record.memory_head_seen = seen_head.sha
            conversation.save_record()

    async def _summariser(self) -> Provider | None:
        model = self.settings.summary_model
        return await self.providers.get_off_loop(model) if model else None

    async def _provider(self, agent: AgentRecord) -> CalibratedProvider:
        """The agent's model, with the token ratio this agent has learned on it."""
        shared = await self.providers.get_off_loop(agent.model, agent.context_window)
        ratios = self._token_ratios.get(agent.id)
        if ratios is None:
            path = self.layout.agent_files(agent.id).token_ratios
            ratios = await asyncio.to_thread(TokenRatioStore, path)
            ratios = self._token_ratios.setdefault(agent.id, ratios)
        return CalibratedProvider(shared, ratios)

    async def _warn_if_window_guessed(
        self, agent: AgentRecord, provider: Provider, emit: Emit
    ) -> None:
        key = (agent.id, provider.model)
        if provider.context_window_source != "default" or key in self._warned_default_window:
            return
        self._warned_default_window.add(key)
        await emit(
            WarningEvent(
                code="context_window_default",
                message=(
                    f"the context window of {provider.model} is unknown, so "
                    f"{provider.context_window:,} tokens is assumed; set "
                    f"{GLOBAL_WINDOW_SETTING} (or `agentctl agents update {agent.name} "
                    "--context-window N`) to the model's real window"
                ),
            )
        )

    async def _warn_if_window_cramped(
        self, agent: AgentRecord, repo: MemoryRepo, head: str, provider: Provider, emit: Emit
    ) -> None:
        """Once per daemon, agent, model and window: a window the system prompt and tools
        nearly fill makes nearly every turn compact, and no compaction policy can help, so
        the user hears it (with the learned token ratio, so from the second turn on a
        tokenizer denser than the estimate)."""
        key = (agent.id, provider.model, provider.context_window)
        measured = (head, provider.token_ratio)
        if key in self._warned_cramped_window or self._window_room_checked.get(key) == measured:
            return
        self._window_room_checked[key] = measured
        request = ModelRequest(
            system=await self.prompts.get(agent, repo, head),
            messages=[],
            tools=[tool.schema for tool in self.tools],
        )
        budget = measure(request, provider.context_window, provider.token_ratio)
        room = cramped_room(budget)
        if room is None:
            return
        self._warned_cramped_window.add(key)
        setting = provider.context_window_setting or GLOBAL_WINDOW_SETTING
        await emit(
            WarningEvent(
                code="context_window_cramped",
                message=(
                    f"the {budget.window:,}-token window of {provider.model} leaves ~{room:,} "
                    f"tokens for the conversation after ~{budget.floor:,} of system prompt "
                    "and tools, so nearly every turn will compact (and queue a reflection); "
                    f"raise {setting} to {comfortable_window(budget.floor):,} or more if the "
                    "model allows it"
                ),
            )
        )

    async def budget(
        self, agent: AgentRecord, repo: MemoryRepo, conversation: Conversation
    ) -> Budget:
        """The next request's budget as the loop would measure it before calling the model,
        with where its window came from."""
        provider = await self._provider(agent)
        request = ModelRequest(
            system=await self.prompts.get(agent, repo),
            messages=shape_messages(conversation.context),
            tools=[tool.schema for tool in self.tools],
        )
        budget = measure(request, provider.context_window, provider.token_ratio)
        return dataclasses.replace(
            budget,
            window_source=provider.context_window_source,
            window_setting=provider.context_window_setting,
        )


def _retry_announcer(emit: Emit) -> Callable[[RetryNotice], Awaitable[None]]:
    async def announce(notice: RetryNotice) -> None:
        await emit(ProviderRetry(**notice.model_dump()))

    return announce


def _memory_edit(
    agent: AgentRecord, repo: MemoryRepo, conversation: Conversation, seen: _SeenHead
) -> MemoryEdit:
    """A ``MemoryEdit`` committing as the agent; its own commits don't trigger a reminder.

    The commit's trailers name the conversation and the assistant message whose tool call
    made the edit (the newest in the window while its tools run), so ``agentctl memory
    why`` can lead from a line to what the user said (:mod:`shared.memory.provenance`).
    The tool's description of its change quotes the model (a command, a path), so it is
    made one line first: no paragraph or cut line of the model's can stand in for the
    trailers (:mod:`shared.memory.signing`).

    The conversation moves past its own commit only if it had seen the HEAD the commit
    was made on, both read under the memory lock: a reflection that merged while this
    edit waited for the lock is still announced by the next turn.
    """

    @contextlib.asynccontextmanager
    async def edit(message: str) -> AsyncIterator[None]:
        calling = next(
            (m.id for m in reversed(conversation.context) if m.role == "assistant"), None
        )
        trailers = turn_trailers(agent.id, conversation.id, calling)
        change = Edit(before="")
        try:
            async with repo.edit(
                with_trailers(one_line(message), trailers),
                author_name=agent.name,
                author_email=f"{agent.id}@agentd.local",
            ) as change:
                yield
        finally:  # also when content was refused: the rest of the edit is committed
            if change.before == seen.sha and change.after is not None:
                seen.sha = change.after

    return edit
