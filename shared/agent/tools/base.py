"""What every tool has: an ``Args`` model (the schema the model sees, and the check of what
it sends), and ``run`` with a per-turn context.

A tool returns text for the model or raises :class:`shared.errors.ToolError`, whose
message becomes the (error) tool result: tool failures are the model's to handle, not
the daemon's.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from shared.agent.tools.args import ToolArgs, parameters_schema, parse_args
from shared.agent.tools.view import PathView
from shared.memory.content import MemoryLimits
from shared.models.messages import Message
from shared.providers.base import ToolSchema
from shared.recall.ranking import Found, SearchRequest

MemoryEdit = Callable[[str], contextlib.AbstractAsyncContextManager[None]]
"""``async with memory_edit("what changed"):`` holds the agent's memory lock for the body,
then commits every change in the memory repo with that message (nothing to commit: no
commit). Tools that may touch memory run their whole write in it (bash its whole
command), so the checkout never has two writers: a reflection merge waits for the lock.
Waiting too long raises :class:`~shared.errors.LockTimeout`, a failed commit
:class:`~shared.errors.MemoryRepoError`, content memory may not hold (a nested repository,
a file over a size limit; taken out, the rest committed)
:class:`~shared.errors.MemoryContentError`; tools tell the model each as a ``ToolError``
or a note in their result."""


@contextlib.asynccontextmanager
async def no_memory_edit(_message: str) -> AsyncIterator[None]:
    """A ``MemoryEdit`` for contexts without a memory repo (some tests)."""
    yield


class Recall(Protocol):
    """Search over one agent's whole message history (the daemon's recall index)."""

    async def search(self, request: SearchRequest) -> Found: ...

    async def around(self, message_id: str, before: int, after: int) -> list[Message]: ...


@dataclass(frozen=True)
class ToolContext:
    """Where a tool runs and what it may touch; built once per turn."""

    agent_id: str
    workspace: Path
    """The agent's scratch directory: bash's cwd and the base for relative paths."""
    memory_dir: Path
    """The agent's memory repo (its main checkout)."""
    bash_timeout_s: float = 60.0
    bash_output_chars: int = 30_000
    bash_network: bool = False
    """Whether sandboxed bash shares the host's network (``AGENTD_TOOL_NETWORK``)."""
    bash_unsandboxed: bool = False
    """Whether bash may run without bubblewrap on a host that lacks it
    (``AGENTD_UNSANDBOXED_BASH``): then it sees everything this user can."""
    memory_edit: MemoryEdit = no_memory_edit
    memory_limits: MemoryLimits = field(default_factory=MemoryLimits)
    """The size limits of memory files and of memory as a whole: the file tools refuse a
    write past them before writing (:mod:`shared.memory.content`)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Variables added to bash's scrubbed environment (e.g. ``MEMORY_DIR``)."""
    conversation_id: str | None = None
    """The conversation the turn belongs to (recall demotes its newest question)."""
    recall: Recall | None = None
    view: PathView | None = None
    """What the model calls its directories; None: the main agent's names
    (:meth:`PathView.for_agent`)."""

    def names(self) -> PathView:
        """The names the model knows its directories by, decided when a tool runs: neutral
        ones where bash runs in bubblewrap, the host paths where it runs bare."""
        return self.view or PathView.for_agent(self.workspace, self.memory_dir)


class Tool(abc.ABC):
    """A tool declares its ``name``, ``description`` and ``Args``; its schema is made from
    them when the class is defined, so a subclass that changes only the description (the
    reflection sub-agent's ``bash``) gets a schema that says so and the same validation."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[ToolArgs]]
    schema: ClassVar[ToolSchema]
    """What the model sees; generated, never written by hand."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.schema = ToolSchema(
            name=cls.name, description=cls.description, parameters=parameters_schema(cls.Args)
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Validate the model's ``args`` (a ``ToolError`` naming each bad field), then run."""
        return await self.execute(parse_args(self.name, self.Args, args), ctx)

    @abc.abstractmethod
    async def execute(self, args: Any, ctx: ToolContext) -> str:
        """Do the work with ``args``, an instance of ``Args``; return the text the model
        sees, or raise ``ToolError``."""
