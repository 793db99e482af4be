"""The socket's ops: one table of each op's request model, handler and reply model.

Grep an op's name (``"memory.why"``) to find its row: what it takes
(:mod:`agentd.daemon.requests`), the :class:`~agentd.daemon.handlers.Handlers` method that runs it,
and what it answers (:mod:`agentd.daemon.replies`). The daemon validates the params before the
handler runs and the reply before it is sent (:func:`reply_of`): a handler that answers
in another shape is an ``internal_error``, logged with what was wrong, and the daemon
serves on. The events an op streams are :mod:`shared.models.events`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from agentd.daemon import replies as r
from agentd.daemon.effective_config import EffectiveConfig
from agentd.daemon.handlers import Handlers
from agentd.daemon.requests import (
    AgentCreate,
    AgentDelete,
    AgentImport,
    AgentTarget,
    AgentUpdate,
    ApiKeyCreate,
    ApiKeyRevoke,
    ApprovalApprove,
    ApprovalDeny,
    ApprovalsList,
    ArchiveUpload,
    Chat,
    ConversationDelete,
    ConversationTarget,
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
    MessagesAround,
    MessagesList,
    NoParams,
    Params,
    RecallSearch,
    ReflectionsList,
    ReflectRequest,
    SleeptimeSettings,
)
from shared.errors import InvalidReply
from shared.models.agents import ConversationRecord
from shared.models.events import Emit
from shared.models.turns import TurnResult

log = structlog.get_logger(__name__)

P = TypeVar("P", bound=Params)
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Op(Generic[P, R]):
    params: type[P]
    handler: Callable[[Handlers, P, Emit], Awaitable[R]]
    reply: type[R]


OPS: dict[str, Op[Any, Any]] = {
    "hello": Op(NoParams, Handlers.hello, r.Hello),
    "status": Op(NoParams, Handlers.status, r.Status),
    "config.show": Op(NoParams, Handlers.config_show, EffectiveConfig),
    "agent.create": Op(AgentCreate, Handlers.agent_create, r.AgentView),
    "agent.list": Op(NoParams, Handlers.agent_list, r.AgentList),
    "agent.show": Op(AgentTarget, Handlers.agent_show, r.AgentView),
    "agent.update": Op(AgentUpdate, Handlers.agent_update, r.AgentView),
    "chat": Op(Chat, Handlers.chat, TurnResult),
    "conversation.create": Op(AgentTarget, Handlers.conversation_create, ConversationRecord),
    "conversation.list": Op(AgentTarget, Handlers.conversation_list, r.ConversationList),
    "messages.list": Op(MessagesList, Handlers.messages_list, r.MessagesPage),
    "context.show": Op(ConversationTarget, Handlers.context_show, r.ContextShown),
    "recall.search": Op(RecallSearch, Handlers.recall_search, r.RecallHits),
    "messages.around": Op(MessagesAround, Handlers.messages_around, r.MessagesNear),
    "reflection.settings": Op(
        SleeptimeSettings, Handlers.reflection_settings, r.ReflectionSettingsShown
    ),
    "reflection.request": Op(ReflectRequest, Handlers.reflection_request, r.ReflectionQueued),
    "reflection.list": Op(ReflectionsList, Handlers.reflection_list, r.ReflectionList),
    "memory.log": Op(MemoryLog, Handlers.memory_log, r.MemoryCommits),
    "memory.path": Op(AgentTarget, Handlers.memory_path, r.MemoryPath),
    "memory.show": Op(MemoryShow, Handlers.memory_show, r.MemoryShown),
    "memory.commit": Op(MemoryCommit, Handlers.memory_commit, r.MemoryCommitted),
    "memory.read": Op(MemoryRead, Handlers.memory_read, r.MemoryEditable),
    "memory.write": Op(MemoryWrite, Handlers.memory_write, r.MemoryWritten),
    "memory.blame": Op(MemoryBlame, Handlers.memory_blame, r.Blamed),
    "memory.why": Op(MemoryWhy, Handlers.memory_why, r.WhyFound),
    "memory.diff": Op(MemoryDiff, Handlers.memory_diff, r.MemoryChanges),
    "memory.revert": Op(MemoryRevert, Handlers.memory_revert, r.MemoryReverted),
    "memory.remember": Op(MemoryRemember, Handlers.memory_remember, r.MemoryRemembered),
    "memory.forget": Op(MemoryForget, Handlers.memory_forget, r.ForgetAnswer),
    "memory.proposals": Op(AgentTarget, Handlers.memory_proposals, r.HeldProposals),
    "memory.accept": Op(MemoryAnswer, Handlers.memory_accept, r.ProposalAnswered),
    "memory.reject": Op(MemoryAnswer, Handlers.memory_reject, r.ProposalAnswered),
    "agent.delete": Op(AgentDelete, Handlers.agent_delete, r.AgentDeleted),
    "conversation.delete": Op(
        ConversationDelete, Handlers.conversation_delete, r.ConversationDeleted
    ),
    "agent.export": Op(AgentTarget, Handlers.agent_export, r.Exported),
    "archive.upload": Op(ArchiveUpload, Handlers.archive_upload, r.Uploaded),
    "agent.import": Op(AgentImport, Handlers.agent_import, r.AgentImported),
    "approval.list": Op(ApprovalsList, Handlers.approval_list, r.ApprovalList),
    "approval.approve": Op(ApprovalApprove, Handlers.approval_approve, r.ApprovalAnswered),
    "approval.deny": Op(ApprovalDeny, Handlers.approval_deny, r.ApprovalAnswered),
    "web.login": Op(NoParams, Handlers.web_login, r.WebLogin),
    "apikey.create": Op(ApiKeyCreate, Handlers.apikey_create, r.ApiKeyCreated),
    "apikey.list": Op(NoParams, Handlers.apikey_list, r.ApiKeyList),
    "apikey.revoke": Op(ApiKeyRevoke, Handlers.apikey_revoke, r.ApiKeyShown),
    "shutdown": Op(NoParams, Handlers.shutdown, r.Stopping),
}
"""Every op the socket takes, in the order ``unknown_op`` lists them."""

TURN_OPS = frozenset({"chat", "approval.approve", "approval.deny"})
"""The ops that run (or carry on) a turn: refused once the daemon is stopping."""


def reply_of(op: str, result: object) -> dict[str, Any]:
    """``result`` as the reply line's JSON, once it is checked to be ``op``'s reply model
    and valid as one (a reply built with ``model_construct`` or changed after it was
    made is checked as well)."""
    model = OPS[op].reply
    if not isinstance(result, model):
        log.error("reply_invalid", op=op, expected=model.__name__, got=type(result).__name__)
        raise InvalidReply(f"internal error: the {op} reply is not a {model.__name__}")
    try:
        checked = model.model_validate(result.model_dump(by_alias=True, warnings=False))
        dumped: dict[str, Any] = checked.model_dump(mode="json", by_alias=True)
    except (ValidationError, PydanticSerializationError) as exc:
        log.error("reply_invalid", op=op, expected=model.__name__, error=str(exc))
        raise InvalidReply(
            f"internal error: the {op} reply does not fit {model.__name__}; see the agentd log"
        ) from exc
    return dumped
