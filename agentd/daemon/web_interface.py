"""What the daemon and its web view know of each other: two narrow interfaces.

The web view (pages, the browser's chat, the OpenAI-compatible endpoint) reads and acts
through :class:`DaemonForWeb`, the few stores and ops it uses, and never imports the
daemon's handlers; the daemon's ops see the view through :class:`WebForDaemon` (a login
link, the endpoint's URL) and never import ``agentd.web``. The daemon
(:mod:`agentd.daemon.server`) builds both sides and starts the view; ``tests/test_layers.py``
keeps the two from importing each other.
"""

from __future__ import annotations

from typing import Protocol

from agentd.daemon.agents import Agents
from agentd.daemon.api_keys import ApiKeys
from agentd.daemon.approvals import Approvals
from agentd.daemon.replies import (
    ContextShown,
    ForgetAnswer,
    MemoryRemembered,
    MessagesPage,
    RecallHits,
    WebLogin,
)
from agentd.daemon.requests import (
    Chat,
    ConversationTarget,
    MemoryForget,
    MemoryRemember,
    MessagesList,
    RecallSearch,
)
from agentd.memory.proposals import MemoryProposals
from agentd.recall.client import RecallClient
from shared.models.agents import AgentRecord
from shared.models.events import Emit
from shared.models.turns import TurnResult
from shared.store.conversations import Conversation


class DaemonForWeb(Protocol):
    """The daemon as the web view uses it (:class:`agentd.daemon.handlers.Handlers` is one)."""

    agents: Agents
    proposals: MemoryProposals
    approvals: Approvals
    recall: RecallClient
    api_keys: ApiKeys
    """The OpenAI-compatible endpoint's bearer keys."""

    def check_length(self, text: str) -> None:
        """Refuse a message over ``AGENTD_MAX_MESSAGE_CHARS``."""

    async def chat_turn(
        self,
        record: AgentRecord,
        conversation: Conversation,
        text: str,
        emit: Emit,
        *,
        reflection_wait_s: float | None = None,
    ) -> TurnResult:
        """One chat turn and what follows it, as the socket's ``chat`` runs it."""

    async def chat(self, params: Chat, emit: Emit) -> TurnResult: ...

    async def messages_list(self, params: MessagesList, emit: Emit) -> MessagesPage: ...

    async def context_show(self, params: ConversationTarget, emit: Emit) -> ContextShown: ...

    async def recall_search(self, params: RecallSearch, emit: Emit) -> RecallHits: ...

    async def memory_remember(self, params: MemoryRemember, emit: Emit) -> MemoryRemembered: ...

    async def memory_forget(self, params: MemoryForget, emit: Emit) -> ForgetAnswer: ...


class WebForDaemon(Protocol):
    """The web view as the daemon's ops use it (:class:`agentd.web.server.WebServer`)."""

    @property
    def api_base(self) -> str | None:
        """The OpenAI-compatible endpoint's base URL; None while the view does not serve."""

    def login(self) -> WebLogin:
        """A one-time login link for ``agentctl web``."""
