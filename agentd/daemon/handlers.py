"""What each socket op does. A handler takes its op's validated params (and an ``emit``
for the events it streams) and returns its op's reply model; :mod:`agentd.daemon.ops` is the
table of which op runs which handler. Errors are raised as ``AgentdError``s and turned
into error replies by the server."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from agentd import __version__
from agentd.archive import ops as archive
from agentd.daemon import replies
from agentd.daemon.agents import Agents
from agentd.daemon.api_key_ops import ApiKeyOps
from agentd.daemon.api_keys import ApiKeys
from agentd.daemon.approvals import Approvals
from agentd.daemon.deletion import Deletions
from agentd.daemon.effective_config import EffectiveConfig, effective_config
from agentd.daemon.requests import (
    AgentCreate,
    AgentDelete,
    AgentImport,
    AgentTarget,
    AgentUpdate,
    ApprovalApprove,
    ApprovalDeny,
    ApprovalsList,
    ArchiveUpload,
    Chat,
    ConversationDelete,
    ConversationTarget,
    MessagesAround,
    MessagesList,
    Params,
    ReflectionsList,
    ReflectRequest,
    SleeptimeSettings,
)
from agentd.daemon.requests import RecallSearch as RecallSearchParams
from agentd.daemon.status import agents_status, redis_status
from agentd.daemon.turns import Turns
from agentd.daemon.web_interface import WebForDaemon
from agentd.memory.history import MemoryHistory
from agentd.memory.notes import MemoryNotes
from agentd.memory.ops import MemoryOps
from agentd.memory.proposals import MemoryProposals
from agentd.recall.client import RecallClient
from agentd.reflection.reflections import Reflections
from shared.errors import PayloadTooLarge
from shared.ids import find_message
from shared.models.agents import AgentRecord, ConversationRecord, ReflectionOverrides
from shared.models.events import Emit, ReflectionTold, WarningEvent
from shared.models.messages import Message, SummaryMessage
from shared.models.turns import TurnResult
from shared.protocol import PROTOCOL_VERSION
from shared.recall.ranking import SearchRequest
from shared.reflection import events
from shared.reflection.pause import describe
from shared.settings import Settings
from shared.store.conversations import Conversation


class Handlers(ApiKeyOps, MemoryOps):
    def __init__(
        self,
        settings: Settings,
        agents: Agents,
        turns: Turns,
        recall: RecallClient,
        reflections: Reflections,
        *,
        web: WebForDaemon,
        on_shutdown: Callable[[], None],
    ) -> None:
        """``web`` is the daemon's web view (the daemon starts it); ``on_shutdown`` is
        what the ``shutdown`` op asks of the daemon."""
        self.settings = settings
        self.agents = agents
        self.turns = turns
        self.recall = recall
        self.reflections = reflections
        self.started_at = time.time()
        self.connections = 0
        self.deletions = Deletions(agents, turns, recall, reflections.settings, agents.clock)
        self.history = MemoryHistory(agents, recall)
        self.notes = MemoryNotes(agents)
        self.proposals = MemoryProposals(agents, settings.memory_limits)
        self.approvals = Approvals(agents, turns, self._after_turn)
        self.api_keys = ApiKeys(settings.layout.api_keys, agents.clock)
        """The OpenAI-compatible endpoint's bearer keys (:mod:`agentd.daemon.api_key_ops`)."""
        self._api_keys_lock = asyncio.Lock()
        self.web = web
        self._on_shutdown = on_shutdown

    async def hello(self, _params: Params, _emit: Emit) -> replies.Hello:
        return replies.Hello(version=__version__, protocol=PROTOCOL_VERSION, pid=os.getpid())

    async def shutdown(self, _params: Params, _emit: Emit) -> replies.Stopping:
        """Stop the daemon as SIGTERM does (:meth:`agentd.daemon.server.Daemon.serve`)."""
        self._on_shutdown()
        return replies.Stopping()

    async def web_login(self, _params: Params, _emit: Emit) -> replies.WebLogin:
        """A one-time login URL for the web view (``agentctl web``): only a caller of this
        private socket, so only this user, can get one."""
        return self.web.login()

    async def config_show(self, _params: Params, _emit: Emit) -> EffectiveConfig:
        """The settings this daemon runs with, for ``agentd doctor``; no secret in it."""
        damaged = self.api_keys.damaged
        return effective_config(
            self.settings,
            self.turns.providers.keys,
            api_endpoint=self.web.api_base,
            api_keys=len(self.api_keys.active),
            api_keys_damaged=damaged.message if damaged is not None else None,
        )

    async def status(self, _params: Params, _emit: Emit) -> replies.Status:
        default_model = self.settings.model
        return replies.Status(
            version=__version__,
            pid=os.getpid(),
            uptime_s=round(time.time() - self.started_at, 1),
            home=str(self.settings.home),
            socket=str(self.settings.layout.socket_path),
            model=default_model,
            ready=True,
            active_turns=self.turns.active,
            connections=self.connections,
            redis=await redis_status(self.reflections.location, self.agents.layout),
            idle_sweep=self.reflections.idle.status(),
            recall_process=replies.RecallProcess(
                pid=self.recall.pid, calls_waiting=self.recall.calls_waiting
            ),
            agents=await self._with_recall_status(
                await asyncio.to_thread(
                    agents_status,
                    self.agents.layout,
                    self.agents.store,
                    self.reflections.settings_for,
                    default_model,
                    self.settings.memory_limits,
                )
            ),
        )

    async def _with_recall_status(self, agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each agent's status with its recall index's, asked of the recall process at once."""
        states = await asyncio.gather(*(self.recall.status(agent["id"]) for agent in agents))
        return [{**agent, "recall": state} for agent, state in zip(agents, states, strict=True)]

    async def agent_create(self, params: AgentCreate, _emit: Emit) -> replies.AgentView:
        return self._agent_view(await self.agents.create(params))

    async def agent_list(self, _params: Params, _emit: Emit) -> replies.AgentList:
        return replies.AgentList(agents=[self._agent_view(r) for r in self.agents.store.list()])

    async def agent_show(self, params: AgentTarget, _emit: Emit) -> replies.AgentView:
        return self._agent_view(await self.agents.resolve(params.agent))

    async def agent_update(self, params: AgentUpdate, _emit: Emit) -> replies.AgentView:
        record = await self.agents.resolve(params.agent)
        return self._agent_view(self.agents.update(record, params))

    async def chat(self, params: Chat, emit: Emit) -> TurnResult:
        self.check_length(params.text)
        record = await self.agents.resolve(params.agent)
        conversation = self.agents.conversation(record, params.conversation)
        return await self.chat_turn(record, conversation, params.text, emit)

    def check_length(self, text: str) -> None:
        if len(text) > self.settings.max_message_chars:
            raise PayloadTooLarge(
                f"the message has {len(text):,} characters; the limit is "
                f"{self.settings.max_message_chars:,} (AGENTD_MAX_MESSAGE_CHARS). Put long "
                "text in a file in the agent's workspace and refer to it instead"
            )

    async def chat_turn(
        self,
        record: AgentRecord,
        conversation: Conversation,
        text: str,
        emit: Emit,
        *,
        reflection_wait_s: float | None = None,
    ) -> TurnResult:
        """One chat turn and what follows it; a reflection it triggers is waited on for
        ``reflection_wait_s`` (default ``AGENTD_REFLECTION_WAIT_S``) to tell its outcome."""
        repo = self.agents.memory(record.id)
        result = await self.turns.chat(record, repo, conversation, text, emit)
        await self._after_turn(record, conversation, result, emit, reflection_wait_s)
        return result

    async def _after_turn(
        self,
        record: AgentRecord,
        conversation: Conversation,
        result: TurnResult,
        emit: Emit,
        wait_s: float | None = None,
    ) -> None:
        """After a chat turn, or an approval's carrying on of one: the reflection check
        (it counts only a turn that ended), and the outcomes and pauses worth telling."""
        request = await self.reflections.after_turn(record, conversation, result)
        outcome = None
        if request is not None:
            outcome = await self.reflections.wait(
                request.request_id, self.settings.reflection_wait_s if wait_s is None else wait_s
            )
        paused = await self.reflections.untold_pause(record)
        for notice in [outcome, *self.reflections.take_notices(record.id)]:
            if notice is not None and self.reflections.worth_telling(notice, paused):
                await emit(ReflectionTold.of(notice))
        if paused is not None:
            text = describe(paused, record.name)
            await emit(WarningEvent(code="reflection_paused", message=text))

    async def approval_list(self, params: ApprovalsList, _emit: Emit) -> replies.ApprovalList:
        """The tool calls waiting for the user's yes, across agents and conversations."""
        return await self.approvals.list(params)

    async def approval_approve(
        self, params: ApprovalApprove, emit: Emit
    ) -> replies.ApprovalAnswered:
        """Approve one waiting call; the last answer of its step carries the turn on."""
        return await self.approvals.approve(params, emit)

    async def approval_deny(self, params: ApprovalDeny, emit: Emit) -> replies.ApprovalAnswered:
        """Deny one waiting call (the reason goes to the model); as approve otherwise."""
        return await self.approvals.deny(params, emit)

    async def reflection_settings(
        self, params: SleeptimeSettings, _emit: Emit
    ) -> replies.ReflectionSettingsShown:
        record = await self.agents.resolve(params.agent)
        changes = params.model_dump(exclude={"agent"}, exclude_none=True)
        if changes:
            current = record.reflection or ReflectionOverrides()
            record.reflection = current.model_copy(update=changes)
            self.agents.store.save(record)
        shown = self.reflections.settings_for(record).public()
        return replies.ReflectionSettingsShown.model_validate(shown)

    async def reflection_request(
        self, params: ReflectRequest, _emit: Emit
    ) -> replies.ReflectionQueued:
        record = await self.agents.resolve(params.agent)
        conversations = params.conversations
        if not conversations and not params.recent:
            conversations = [self.agents.conversation(record, None).id]
        for conversation_id in conversations or []:
            self.agents.conversation(record, conversation_id)  # unknown ids fail here
        request, sent = await self.reflections.request_manual(
            record, conversations or [], recent=params.recent, instruction=params.instruction
        )
        outcome = await self.reflections.wait(request.request_id, params.wait_s if sent else 0)
        return replies.ReflectionQueued(
            request_id=request.request_id,
            queued=sent,
            outcome=ReflectionTold.of(outcome) if outcome is not None else None,
        )

    async def reflection_list(self, params: ReflectionsList, _emit: Emit) -> replies.ReflectionList:
        record = await self.agents.resolve(params.agent)
        outcomes = events.read(self.agents.layout.reflections_dir(record.id), tail=params.limit)
        return replies.ReflectionList(
            agent_id=record.id, reflections=[ReflectionTold.of(o) for o in outcomes]
        )

    async def conversation_create(self, params: AgentTarget, _emit: Emit) -> ConversationRecord:
        record = await self.agents.resolve(params.agent)
        return self.agents.new_conversation(record).record

    async def conversation_list(self, params: AgentTarget, _emit: Emit) -> replies.ConversationList:
        record = await self.agents.resolve(params.agent)
        return replies.ConversationList(
            agent_id=record.id, conversations=self.agents.conversations(record)
        )

    async def messages_list(self, params: MessagesList, _emit: Emit) -> replies.MessagesPage:
        record = await self.agents.resolve(params.agent)
        conversation = self.agents.conversation(record, params.conversation)
        messages = await asyncio.to_thread(list, conversation.log)
        page = _page(messages, params)
        return replies.MessagesPage(
            agent_id=record.id,
            conversation_id=conversation.id,
            messages=[m.to_api() for m in page],
        )

    async def context_show(self, params: ConversationTarget, _emit: Emit) -> replies.ContextShown:
        record = await self.agents.resolve(params.agent)
        conversation = self.agents.conversation(record, params.conversation)
        repo = self.agents.memory(record.id)
        budget = await self.turns.budget(record, repo, conversation)
        first = conversation.context[0] if conversation.context else None
        last_compaction = (
            first.payload.compaction.model_dump(mode="json")
            if isinstance(first, SummaryMessage)
            else None
        )
        return replies.ContextShown.model_validate(
            {
                "agent_id": record.id,
                "conversation_id": conversation.id,
                "model": record.model or self.settings.model,
                **budget.to_dict(),
                "last_compaction": last_compaction,
            }
        )

    async def recall_search(self, params: RecallSearchParams, _emit: Emit) -> replies.RecallHits:
        record = await self.agents.resolve(params.agent)
        request = SearchRequest(
            query=params.query,
            limit=params.limit,
            conversation_id=params.conversation,
            role=params.role,
            since=params.since,
            until=params.until,
        )
        found = await self.recall.search(record.id, request)
        return replies.RecallHits(
            agent_id=record.id,
            hits=[{**asdict(hit), "created_at": _iso(hit.created_at)} for hit in found.hits],
            incomplete=found.incomplete,
        )

    async def messages_around(self, params: MessagesAround, _emit: Emit) -> replies.MessagesNear:
        record = await self.agents.resolve(params.agent)
        messages = await self.recall.around(
            record.id, params.message_id, params.before, params.after
        )
        return replies.MessagesNear(agent_id=record.id, messages=[m.to_api() for m in messages])

    async def agent_delete(self, params: AgentDelete, _emit: Emit) -> replies.AgentDeleted:
        record = await self.agents.resolve(params.agent)
        deleted = await self.deletions.delete_agent(record)
        return replies.AgentDeleted(**deleted.to_dict(), name=record.name)

    async def conversation_delete(
        self, params: ConversationDelete, _emit: Emit
    ) -> replies.ConversationDeleted:
        record = await self.agents.resolve(params.agent)
        deleted = await self.deletions.delete_conversation(record, params.conversation)
        return replies.ConversationDeleted(**deleted.to_dict(), conversation_id=params.conversation)

    async def agent_export(self, params: AgentTarget, emit: Emit) -> replies.Exported:
        return await archive.export(self.agents, await self.agents.resolve(params.agent), emit)

    async def archive_upload(self, params: ArchiveUpload, _emit: Emit) -> replies.Uploaded:
        upload, size = await asyncio.to_thread(
            archive.append_upload, self.agents.layout, params.upload, params.offset, params.data
        )
        return replies.Uploaded(upload=upload, bytes=size)

    async def agent_import(self, params: AgentImport, _emit: Emit) -> replies.AgentImported:
        imported = await archive.import_agent(
            self.agents,
            params.upload,
            keep_id=params.keep_id,
            name=params.name,
            limits=self.settings.memory_limits,
        )
        self.recall.start([imported.record.id])
        return replies.AgentImported(
            **self._agent_view(imported.record).model_dump(),
            conversations=imported.conversations,
            memory_head=imported.memory_head,
        )

    def _agent_view(self, record: AgentRecord) -> replies.AgentView:
        return replies.AgentView(
            **record.model_dump(),
            effective_model=record.model or self.settings.model,
            model_is_default=record.model is None,
            memory_dir=str(self.agents.layout.memory_dir(record.id)),
        )


def _page(messages: list[Message], params: MessagesList) -> list[Message]:
    """Up to ``limit`` messages in the order asked (``desc``: newest first).

    A cursor is where the page starts, so paging on from the last message shown never
    skips one: ``after`` takes the messages right after it, ``before`` (alone) those right
    before it; with neither, ``desc`` starts at the newest and ``asc`` at the oldest.
    Cursors are full or short message ids of this conversation."""
    ids = [m.id for m in messages]
    start, end = 0, len(messages)
    if params.before is not None:
        end = find_message(params.before, ids, "this conversation")
    if params.after is not None:
        start = find_message(params.after, ids, "this conversation") + 1
    window = messages[start:end] if start < end else []
    from_start = params.after is not None or (params.before is None and params.order == "asc")
    page = window[: params.limit] if from_start else window[-params.limit :]
    return page[::-1] if params.order == "desc" else page


def _iso(timestamp: float) -> str:
    """A POSIX time as the API writes every time: ISO 8601 in UTC, ``Z`` like pydantic."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
