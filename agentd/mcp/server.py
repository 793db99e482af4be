"""The MCP server ``agentctl mcp`` runs on stdio: tools, memory files as resources, and
arguments checked before a tool runs.

Resources: every memory file of every agent, ``agentd://agents/<agent>/memory/<path>``
(``text/markdown``), listed from the daemon when the host asks (so a file a reflection
added appears), and readable by that template for any agent and path. A daemon that is
down makes the listing and the read an MCP error that says so.

The SDK checks each argument against its tool's schema, but lets an argument the tool
does not take pass unseen; here that is an error naming it (``unknown argument 'txt'``),
as the socket refuses an unknown field: a misspelled ``conversation`` must not quietly
send the message to another conversation. A refused argument is said in one line per
argument (``invalid arguments: limit: Input should be greater than or equal to 1``), not
in pydantic's multi-line report with its links.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import ToolAnnotations
from pydantic import ValidationError

from agentd import __version__
from agentd.client.connection import Connection
from agentd.mcp.daemon import Daemon
from agentd.mcp.tools import RESOURCE_PREFIX, Tools, description, resource_uri
from shared.errors import ClientError, DaemonError

INSTRUCTIONS = (
    "agentd hosts stateful agents: each has a memory (markdown files in a git repo, the "
    "system/ ones shown in every prompt), every past message searchable, and background "
    "reflection that consolidates what matters into memory. Use search_history and the "
    "memory tools to look things up, send_message to talk to an agent, remember to add a "
    "fact to its memory, and why to see where a memory line came from."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class AgentdServer(MCPServer):
    """The SDK's server, with memory files listed from the daemon and unknown tool
    arguments refused."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(
            "agentd", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.daemon = daemon
        self._arguments: dict[str, set[str]] | None = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        if self._arguments is None:
            listed = await self.list_tools()
            self._arguments = {t.name: set(t.input_schema.get("properties", {})) for t in listed}
        known = self._arguments.get(name)
        if known is not None and (unknown := sorted(set(arguments) - known)):
            takes = ", ".join(sorted(known)) or "no arguments"
            raise ToolError(
                f"unknown argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(u) for u in unknown)}: {name} takes {takes}"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"invalid arguments: {_reasons(exc.__cause__)}") from None
            raise

    async def list_resources(self) -> list[types.Resource]:
        try:
            agents = (await self.daemon.result("agent.list"))["agents"]
            listed = []
            for agent in agents:
                files = (await self.daemon.result("memory.show", {"agent": agent["id"]}))["files"]
                listed += [
                    types.Resource(
                        uri=resource_uri(agent["name"], path),
                        name=f"{agent['name']}: {path}",
                        description=description(text) or None,
                        mime_type="text/markdown",
                        size=len(text.encode()),
                    )
                    for path, text in files.items()
                ]
        except DaemonError as exc:
            raise ResourceError(str(exc)) from None
        return listed


def _reasons(error: ValidationError) -> str:
    """Each argument the schema refused and why, as the socket words it
    (``limit: Input should be greater than or equal to 1``)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in found['loc']) or 'arguments'}: {found['msg']}"
        for found in error.errors()
    )


def build(default_agent: str | None, daemon: Daemon | None = None) -> AgentdServer:
    daemon = daemon or Daemon()
    tools = Tools(daemon, default_agent)
    server = AgentdServer(daemon)
    server.add_tool(tools.list_agents, annotations=READ_ONLY)
    server.add_tool(tools.search_history, annotations=READ_ONLY)
    server.add_tool(tools.list_memory_files, annotations=READ_ONLY)
    server.add_tool(tools.read_memory_file, annotations=READ_ONLY, structured_output=False)
    server.add_tool(tools.why, annotations=READ_ONLY)
    server.add_tool(
        tools.send_message,
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    server.add_tool(
        tools.remember,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
    )

    @server.resource(
        RESOURCE_PREFIX + "{agent}/memory/{+path}",
        name="memory_file",
        description="A memory file of an agent, as committed.",
        mime_type="text/markdown",
    )
    async def memory_file(agent: str, path: str) -> str:
        try:
            shown = await daemon.result("memory.show", {"agent": agent, "path": path})
        except DaemonError as exc:
            raise ResourceError(str(exc)) from None
        return str(shown["text"])

    return server


def serve(default_agent: str | None) -> int:
    """Serve on stdin/stdout until the host closes stdin; 0 then. A daemon that is down
    is said on stderr (the host's log) at once; each call then says it again. Stdout is
    the protocol's alone: any log line goes to stderr."""
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    try:
        Connection().close()
    except ClientError as exc:
        print(
            f"agentctl mcp: {exc.code}: {exc.message} Until it runs, every tool call and "
            "resource read answers with this error.",
            file=sys.stderr,
            flush=True,
        )
    build(default_agent).run("stdio")
    return 0
