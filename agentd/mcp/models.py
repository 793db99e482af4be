"""What the MCP tools take and give, as pydantic types: the SDK builds each tool's input
schema from its parameters (these annotated types) and its output schema from the model
it returns, and checks a call's arguments against them before the tool runs, so a bad
argument is a tool error that names the field and the rule it broke.

The limits mirror the daemon's request models (:mod:`agentd.daemon.requests`), which check
again: the schema tells the host's model what fits before it calls.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

AgentArg = Annotated[
    str | None,
    Field(
        pattern=ID_PATTERN,
        description="The agent's name or id (list_agents shows them); omitted: the agent "
        "`agentctl mcp --agent` names, else the default agent.",
    ),
]
ConversationArg = Annotated[
    str | None,
    Field(
        pattern=ID_PATTERN,
        description="A conversation id (conv-…), as a reply or a search hit gives it.",
    ),
]
MemoryPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1000,
        description="A memory file's path, relative to the memory directory (list_memory_files "
        "lists them), e.g. system/human.md.",
    ),
]


class Agent(BaseModel):
    id: str
    name: str
    model: str
    """The model its turns use."""


class Agents(BaseModel):
    agents: list[Agent]


class Hit(BaseModel):
    message_id: str
    conversation_id: str
    role: str
    created_at: str
    """ISO 8601, UTC."""
    score: float
    text: str


class Hits(BaseModel):
    agent_id: str
    hits: list[Hit]
    """Best first."""
    incomplete: str | None = None
    """Why some messages may not have been searched yet (the index is catching up)."""


class MemoryFile(BaseModel):
    path: str
    description: str
    """What its frontmatter says it holds: how the agent's prompt lists it."""
    uri: str
    """The file as an MCP resource."""


class MemoryFiles(BaseModel):
    agent_id: str
    files: list[MemoryFile]


class Source(BaseModel):
    """The memory commit that last wrote a line, and who made it."""

    commit: str
    authored_at: str
    kind: Literal["turn", "reflection", "user", "mcp", "merge", "initial"]
    """turn: the agent's own edit in a chat turn; reflection: a background reflection;
    user: the user (a hand edit, agentctl remember, the web view); mcp: an MCP host's
    remember; merge, initial: a merge, the agent's creation."""
    subject: str
    via: str | None = None
    """For a remembered note: agentctl, web or mcp."""
    client: str | None = None
    """For a note sent over MCP: the host's name and version."""
    conversation_id: str | None = None
    message_id: str | None = None
    job_id: str | None = None
    reflected_messages: str | None = None
    """For a reflection: the first and last ids of the messages it reflected on."""


class Evidence(BaseModel):
    """A user message the line came from."""

    message_id: str
    conversation_id: str
    created_at: str
    text: str


class WhyLine(BaseModel):
    path: str
    line_no: int
    text: str
    source: Source
    evidence: list[Evidence]


class Why(BaseModel):
    agent_id: str
    lines: list[WhyLine]
    more: int
    """Matching lines left out (narrow the text to see them)."""


class Waiting(BaseModel):
    """A tool call of the turn that waits for the user's yes (``agentctl approvals``)."""

    approval_id: str
    tool: str
    arguments: str


class Reply(BaseModel):
    agent_id: str
    conversation_id: str
    """Pass it back to go on in this conversation."""
    reply: str
    stop_reason: str
    waiting_for_approval: list[Waiting] = Field(default_factory=list)


class Remembered(BaseModel):
    agent_id: str
    path: str
    line: str
    """The line as memory keeps it."""
    commit: str | None
    """The memory commit that added it; None: the file held this line already."""
