"""The MCP tools: each one request (or two) on the daemon's socket, its answer reshaped
for the host's model.

Tool errors are what the model reads: a daemon's typed error becomes the tool's error
text as ``code: message`` (``not_running: agentd is not running …``, ``unknown_agent: …``),
so it can tell a typo from a stopped daemon and say what to do.

``send_message`` talks in a conversation of this MCP session's own, made on its first
message to each agent (a host's chats do not interleave with the user's in the agent's
default conversation); the reply names it, and passing it, or any other conversation id,
goes on there. Memory, recall and reflection span every conversation of the agent.

``remember`` commits as ``mcp``, with ``Via: mcp`` and the name the host gave at
``initialize`` (``MCP-Client``), so ``agentctl memory why`` tells such a line from the
user's own. There is no ``forget`` tool: taking lines out of memory stays with the user
(``agentctl forget``, the web view).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from agentd.mcp.daemon import Daemon
from agentd.mcp.models import (
    Agent,
    AgentArg,
    Agents,
    ConversationArg,
    Evidence,
    Hit,
    Hits,
    MemoryFile,
    MemoryFiles,
    MemoryPath,
    Remembered,
    Reply,
    Source,
    Waiting,
    Why,
    WhyLine,
)
from shared.errors import DaemonError, FrontmatterError
from shared.memory import frontmatter
from shared.memory.notes import MAX_NOTE_CHARS

RESOURCE_PREFIX = "agentd://agents/"
"""A memory file as a resource: ``agentd://agents/<agent name>/memory/<path>``."""


def resource_uri(agent: str, path: str) -> str:
    return f"{RESOURCE_PREFIX}{agent}/memory/{path}"


def description(text: str) -> str:
    """A memory file's frontmatter description ("" when it has none or cannot be read)."""
    try:
        described = frontmatter.parse(text)[0].get("description", "")
    except FrontmatterError:
        return ""
    return " ".join(described.split()) if isinstance(described, str) else ""


class Tools:
    """The tools of one ``agentctl mcp`` process (one host session)."""

    def __init__(self, daemon: Daemon, default_agent: str | None) -> None:
        self.daemon = daemon
        self.default_agent = default_agent
        self.conversations: dict[str, str] = {}
        """This session's conversation with each agent (by agent id)."""
        self._starting = anyio.Lock()

    async def ask(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await self.daemon.result(op, params)
        except DaemonError as exc:
            raise ToolError(str(exc)) from None

    def agent(self, agent: str | None) -> str | None:
        return agent or self.default_agent

    async def list_agents(self) -> Agents:
        """The agents agentd hosts. Each has its own model, memory (a git repo of markdown
        files, shown in its prompt), full searchable history and background reflection."""
        listed = await self.ask("agent.list")
        return Agents(
            agents=[
                Agent(id=a["id"], name=a["name"], model=a["effective_model"])
                for a in listed["agents"]
            ]
        )

    async def search_history(
        self,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description='Words to find; "quoted phrases" must match as written.',
            ),
        ],
        agent: AgentArg = None,
        conversation: ConversationArg = None,
        role: Annotated[
            Literal["user", "assistant", "tool"] | None,
            Field(description="Only messages of this role."),
        ] = None,
        since: Annotated[
            str | None,
            Field(max_length=40, description="From this time on: ISO date or date-time."),
        ] = None,
        until: Annotated[
            str | None,
            Field(max_length=40, description="Up to this time: ISO date or date-time."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="At most this many hits.")] = 10,
    ) -> Hits:
        """Search every past message of an agent, in all its conversations (BM25, best
        first): what the user said, what the agent answered, what its tools returned."""
        params = {
            "agent": self.agent(agent),
            "query": query,
            "conversation": conversation,
            "role": role,
            "since": since,
            "until": until,
            "limit": limit,
        }
        found = await self.ask("recall.search", params)
        hits = [Hit(**{key: hit[key] for key in Hit.model_fields}) for hit in found["hits"]]
        return Hits(agent_id=found["agent_id"], hits=hits, incomplete=found["incomplete"])

    async def list_memory_files(self, agent: AgentArg = None) -> MemoryFiles:
        """An agent's memory files, each with its description. Files under system/ are
        in every prompt of the agent in full; the others it reads when it needs them."""
        record = await self.ask("agent.show", {"agent": self.agent(agent)})
        shown = await self.ask("memory.show", {"agent": record["id"]})
        files = [
            MemoryFile(
                path=path, description=description(text), uri=resource_uri(record["name"], path)
            )
            for path, text in shown["files"].items()
        ]
        return MemoryFiles(agent_id=record["id"], files=files)

    async def read_memory_file(self, path: MemoryPath, agent: AgentArg = None) -> str:
        """One memory file of an agent, as committed (frontmatter and all)."""
        shown = await self.ask("memory.show", {"agent": self.agent(agent), "path": path})
        return str(shown["text"])

    async def why(
        self,
        text: Annotated[
            str,
            Field(
                min_length=1,
                max_length=1000,
                description="Text of the memory line(s) to explain (case-insensitive).",
            ),
        ],
        agent: AgentArg = None,
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many lines.")] = 10,
    ) -> Why:
        """Where memory lines came from: for each line containing the text, the commit
        that wrote it (the agent in a turn, a reflection, the user, an MCP host) and the
        user messages it came from."""
        found = await self.ask(
            "memory.why", {"agent": self.agent(agent), "text": text, "limit": limit}
        )
        lines = [_why_line(match) for match in found["matches"]]
        return Why(agent_id=found["agent_id"], lines=lines, more=found["more"])

    async def send_message(
        self,
        text: Annotated[str, Field(min_length=1, description="The message to the agent.")],
        agent: AgentArg = None,
        conversation: ConversationArg = None,
    ) -> Reply:
        """Send a message to an agent and get its reply: a full turn, with its memory,
        recall and tools. Without a conversation id it goes to this session's own
        conversation with the agent (started on the first message); the reply names it."""
        agent = self.agent(agent)
        if conversation is None:
            conversation = await self._conversation(agent)
        params = {"agent": agent, "conversation": conversation, "text": text}
        result = await self.ask("chat", params)
        if result["stop_reason"] == "error" and result.get("error"):
            raise ToolError(f"{result['error']['code']}: {result['error']['message']}")
        waiting = [
            Waiting(approval_id=call["id"], tool=call["name"], arguments=call["arguments"])
            for call in result.get("approvals", [])
        ]
        return Reply(
            agent_id=result["agent_id"],
            conversation_id=result["conversation_id"],
            reply=result["text"],
            stop_reason=result["stop_reason"],
            waiting_for_approval=waiting,
        )

    async def remember(
        self,
        text: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_NOTE_CHARS,
                description="The note, one fact (made one line).",
            ),
        ],
        ctx: Context,
        agent: AgentArg = None,
        file: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=1000,
                description="The memory file it goes to (default: system/human.md, what "
                "the agent knows about the user, in every prompt).",
            ),
        ] = None,
    ) -> Remembered:
        """Add a note to an agent's memory, as a `- ` line committed to its memory repo
        (the agent sees it from its next turn on). The commit records that it came
        through MCP and from which host."""
        params = {
            "agent": self.agent(agent),
            "text": text,
            "path": file,
            "via": "mcp",
            "client": _client(ctx),
        }
        done = await self.ask("memory.remember", params)
        return Remembered(
            agent_id=done["agent_id"], path=done["path"], line=done["line"], commit=done["commit"]
        )

    async def _conversation(self, agent: str | None) -> str:
        """This session's conversation with ``agent``, started on first use."""
        record = await self.ask("agent.show", {"agent": agent})
        async with self._starting:
            if record["id"] not in self.conversations:
                made = await self.ask("conversation.create", {"agent": record["id"]})
                self.conversations[record["id"]] = made["id"]
            return self.conversations[record["id"]]


def _client(ctx: Context) -> str | None:
    """The host's name and version as it introduced itself (``initialize``)."""
    params = ctx.session.client_params
    if params is None:
        return None
    info = params.client_info
    return f"{info.name} {info.version}"[:200]


def _why_line(match: dict[str, Any]) -> WhyLine:
    commit = match["commit"]
    provenance = commit["provenance"]
    first, last = provenance.get("reflected_first"), provenance.get("reflected_last")
    source = Source(
        commit=commit["short_sha"],
        authored_at=commit["authored_at"],
        kind=provenance["kind"],
        subject=commit["subject"],
        via=provenance.get("via"),
        client=provenance.get("client"),
        conversation_id=provenance.get("conversation_id"),
        message_id=provenance.get("message_id"),
        job_id=provenance.get("job_id"),
        reflected_messages=f"{first}..{last}" if first and last else None,
    )
    evidence = [
        Evidence(**{key: said[key] for key in Evidence.model_fields}) for said in match["evidence"]
    ]
    return WhyLine(
        path=match["path"],
        line_no=match["line_no"],
        text=match["text"],
        source=source,
        evidence=evidence,
    )
