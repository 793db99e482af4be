"""``agentctl mcp``: an agent's memory, recall and chat as a Model Context Protocol server.

An MCP host (Claude Desktop, Cursor, an IDE, the SDK's own client) starts ``agentctl
mcp`` as a command and speaks JSON-RPC on its stdin and stdout. Built on the official
``mcp`` SDK (:class:`mcp.server.mcpserver.MCPServer`), it holds nothing itself: every tool
call and resource read is one request on the daemon's socket (:mod:`.daemon`), so the
host gets the same agents, memory, recall and reflection as ``agentctl``, and a daemon
that is down is a clear error on that call, not a server that fails to start.

:mod:`.tools` holds the tools and their input and output models, :mod:`.server` the
server, its resources (memory files) and the check of tool arguments.
"""
