"""``agentctl mcp`` driven by the ``mcp`` SDK's own client over stdio, as an MCP host runs
it: the real agentctl process, the real daemon on its socket, the mock model.

It lists its tools with schemas the SDK made from pydantic types, answers each tool,
serves memory files as resources, refuses bad input with a tool error that says why
(changing nothing), remembers a note whose provenance names MCP and the host, says
plainly when the daemon is down (and recovers when it is up), and a call the host
cancels cancels the agent's turn as Ctrl-C does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import pytest

from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.sdk import LazyModule
from tests.support.waiting import wait_for
from tests.web.site import HeldProvider

if TYPE_CHECKING:
    import mcp
    import mcp_types
else:  # imported where a test first speaks the SDK, not at collection (tests/support/sdk.py)
    mcp = LazyModule("mcp")
    mcp_types = LazyModule("mcp_types")

pytestmark = [pytest.mark.slow, pytest.mark.sdk]

HOST = {"name": "test-host", "version": "1.2.3"}
TOOLS = {
    "list_agents",
    "search_history",
    "list_memory_files",
    "read_memory_file",
    "why",
    "send_message",
    "remember",
}
READ_ONLY = {"list_agents", "search_history", "list_memory_files", "read_memory_file", "why"}


@asynccontextmanager
async def mcp_session(*args: str, errlog: TextIO | None = None) -> AsyncIterator[mcp.ClientSession]:
    """``agentctl mcp ARGS`` started by the SDK's stdio client, initialized as HOST."""
    server = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "agentd.client", "mcp", *args], env=dict(os.environ)
    )
    async with (
        mcp.stdio_client(server, errlog=errlog or sys.stderr) as (read, write),
        mcp.ClientSession(read, write, client_info=mcp_types.Implementation(**HOST)) as session,
    ):
        await session.initialize()
        yield session


def run(test: Callable[[mcp.ClientSession], Awaitable[None]], *args: str) -> None:
    async def main() -> None:
        async with mcp_session(*args) as session:
            await test(session)

    anyio.run(main)


def text(result: mcp_types.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mcp_types.TextContent)
    return block.text


def ok(result: mcp_types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content


@pytest.fixture
def agent(daemon: DaemonRunner) -> dict[str, Any]:
    daemon.start()
    daemon.result("chat", {"text": "hello, I work on a TypeScript monorepo"})
    return daemon.result("agent.show", {})


def test_the_tools_are_listed_with_schemas_made_from_their_pydantic_types(
    agent: dict[str, Any],
) -> None:
    async def check(session: mcp.ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}

        assert set(tools) == TOOLS
        remember = tools["remember"].input_schema
        assert remember["required"] == ["text"]
        assert set(remember["properties"]) == {"text", "agent", "file"}  # no ctx
        assert remember["properties"]["text"]["maxLength"] == 2000
        agent_field = tools["search_history"].input_schema["properties"]["agent"]
        assert {"pattern": "^[A-Za-z0-9_-]{1,64}$", "type": "string"} in agent_field["anyOf"]
        limit = tools["search_history"].input_schema["properties"]["limit"]
        assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 100, 10)
        for name, tool in tools.items():
            assert tool.description, name
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is (name in READ_ONLY), name
            assert (tool.output_schema is None) is (name == "read_memory_file"), name

    run(check)


def test_every_tool_answers_from_the_daemon(daemon: DaemonRunner, agent: dict[str, Any]) -> None:
    human = daemon.result("memory.show", {"path": "system/human.md"})["text"]
    default_conversation = daemon.result("conversation.list")["conversations"]

    async def check(session: mcp.ClientSession) -> None:
        agents = ok(await session.call_tool("list_agents", {}))["agents"]
        assert agents == [{"id": agent["id"], "name": "default", "model": "mock"}]

        found = ok(await session.call_tool("search_history", {"query": "TypeScript"}))
        assert found["agent_id"] == agent["id"] and found["incomplete"] is None
        assert found["hits"][0]["text"] == "hello, I work on a TypeScript monorepo"
        assert found["hits"][0]["role"] == "user"

        files = ok(await session.call_tool("list_memory_files", {"agent": "default"}))["files"]
        assert [(f["path"], f["uri"]) for f in files] == [
            ("system/human.md", "agentd://agents/default/memory/system/human.md"),
            ("system/persona.md", "agentd://agents/default/memory/system/persona.md"),
        ]
        assert files[0]["description"] == "What I know about the user."
        read = await session.call_tool("read_memory_file", {"path": "system/human.md"})
        assert not read.is_error and text(read) == human

        first = ok(await session.call_tool("send_message", {"text": "hi there"}))
        again = ok(await session.call_tool("send_message", {"text": "still me"}))
        assert first["reply"] == "（mock）我听到了：hi there"
        assert first["stop_reason"] == "end_turn" and first["waiting_for_approval"] == []
        assert again["conversation_id"] == first["conversation_id"]
        assert first["conversation_id"] not in [c["id"] for c in default_conversation]
        there = {"text": "back here", "conversation": default_conversation[0]["id"]}
        back = ok(await session.call_tool("send_message", there))
        assert back["conversation_id"] == default_conversation[0]["id"]

        remembered = ok(await session.call_tool("remember", {"text": "I take my coffee black"}))
        assert remembered["line"] == "- I take my coffee black"
        assert remembered["path"] == "system/human.md" and remembered["commit"]
        why = ok(await session.call_tool("why", {"text": "coffee"}))
        [line] = why["lines"]
        assert line["source"]["kind"] == "mcp" and line["source"]["via"] == "mcp"
        assert line["source"]["client"] == "test-host 1.2.3"
        assert remembered["commit"].startswith(line["source"]["commit"])
        told = ok(await session.call_tool("send_message", {"text": "what do you know about me?"}))
        assert "- I take my coffee black" in told["reply"]

    run(check)

    messages = daemon.result("messages.list", {"conversation": default_conversation[0]["id"]})
    assert "back here" in [m["content"] for m in messages["messages"]]
    why = run_agentctl("memory", "why", "coffee")
    assert why.returncode == 0, why.stderr
    lines = why.stdout.splitlines()
    assert "  mcp  " in lines[1] and "via mcp" in lines[1]
    assert lines[2] == "  remembered over MCP by test-host 1.2.3 (agentctl mcp's remember tool)"


def test_a_reply_names_the_calls_that_wait_for_the_users_approval(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    daemon.result("agent.update", {"agent": "default", "requires_approval": ["bash"]})
    replies: list[dict[str, Any]] = []

    async def check(session: mcp.ClientSession) -> None:
        replies.append(ok(await session.call_tool("send_message", {"text": "run `echo hi`"})))

    run(check)

    [reply] = replies
    [waiting] = daemon.result("approval.list")["approvals"]
    assert reply["stop_reason"] == "requires_approval"
    assert reply["waiting_for_approval"] == [
        {"approval_id": waiting["id"], "tool": "bash", "arguments": waiting["arguments"]}
    ]


def test_memory_files_are_resources(daemon: DaemonRunner, agent: dict[str, Any]) -> None:
    daemon.result("memory.remember", {"text": "ships in May", "path": "notes/project.md"})
    project = daemon.result("memory.show", {"path": "notes/project.md"})["text"]

    async def check(session: mcp.ClientSession) -> None:
        listed = (await session.list_resources()).resources
        assert [(str(r.uri), r.name, r.mime_type) for r in listed] == [
            (
                "agentd://agents/default/memory/notes/project.md",
                "default: notes/project.md",
                "text/markdown",
            ),
            (
                "agentd://agents/default/memory/system/human.md",
                "default: system/human.md",
                "text/markdown",
            ),
            (
                "agentd://agents/default/memory/system/persona.md",
                "default: system/persona.md",
                "text/markdown",
            ),
        ]
        [template] = (await session.list_resource_templates()).resource_templates
        assert template.uri_template == "agentd://agents/{agent}/memory/{+path}"
        read = await session.read_resource("agentd://agents/default/memory/notes/project.md")
        [contents] = read.contents
        assert contents.text == project  # type: ignore[union-attr]
        by_id = await session.read_resource(
            f"agentd://agents/{agent['id']}/memory/notes/project.md"
        )
        assert by_id.contents[0].text == project  # type: ignore[union-attr]
        for uri in (
            "agentd://agents/default/memory/notes/none.md",
            "agentd://agents/nobody/memory/system/human.md",
        ):
            with pytest.raises(mcp.MCPError) as refused:
                await session.read_resource(uri)
            assert "memory_path" in str(refused.value) or "unknown_agent" in str(refused.value)

    run(check)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("remember", {}, "invalid arguments: text: Field required"),
    ("remember", {"text": "x" * 2001}, "String should have at most 2000 characters"),
    ("remember", {"text": "x", "agent": "../etc"}, "String should match pattern"),
    ("remember", {"text": "x", "file": "notes.txt"}, "memory_path: memory path 'notes.txt'"),
    ("remember", {"text": " \n\t"}, "malformed_request: the note is empty"),
    (
        "search_history",
        {"query": "x", "limit": 0},
        "limit: Input should be greater than or equal to 1",
    ),
    ("search_history", {"query": "x", "role": "system"}, "'user', 'assistant' or 'tool'"),
    ("search_history", {"query": "x", "agent": "nobody"}, "unknown_agent: no agent named"),
    ("search_history", {"query": "x", "since": "yesterday"}, "malformed_request: params.since"),
    ("send_message", {"text": "hi", "conversaton": "conv-x"}, "unknown argument 'conversaton'"),
    ("send_message", {"text": "hi", "conversation": "conv-nope"}, "unknown_conversation"),
    ("read_memory_file", {"path": "../secret.md"}, "memory_path: memory path '../secret.md'"),
    ("why", {"text": "x", "limit": "many"}, "limit: Input should be a valid integer"),
    ("list_agents", {"agent": "default"}, "unknown argument 'agent': list_agents takes no"),
]


def test_bad_input_is_a_tool_error_saying_why_and_changes_nothing(
    daemon: DaemonRunner, agent: dict[str, Any]
) -> None:
    commits = daemon.result("memory.log")["commits"]
    conversations = daemon.result("conversation.list")["conversations"]
    errors: list[str] = []

    async def check(session: mcp.ClientSession) -> None:
        for name, arguments, _reason in BAD_CALLS:
            result = await session.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            errors.append(text(result))

    run(check)

    for (name, arguments, reason), error in zip(BAD_CALLS, errors, strict=True):
        assert reason in error, (name, arguments, error)
        assert "\n" not in error and "pydantic.dev" not in error, error
    assert daemon.result("memory.log")["commits"] == commits
    assert daemon.result("conversation.list")["conversations"] == conversations


def test_a_call_while_the_daemon_is_down_says_so_and_the_next_one_after_it_starts_works(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    with tempfile.TemporaryFile("w+") as errlog:

        async def main() -> None:
            async with mcp_session(errlog=errlog) as session:
                down = await session.call_tool("list_agents", {})
                assert down.is_error
                assert text(down).endswith(
                    f"not_running: agentd is not running (no daemon on {agentd_home}/run/"
                    "agentd.sock). Start it with `agentd up` (from a checkout: `make up`), then "
                    "try again."
                )
                with pytest.raises(mcp.MCPError, match="not_running: agentd is not running"):
                    await session.list_resources()
                await anyio.to_thread.run_sync(daemon.start)
                up = ok(await session.call_tool("list_agents", {}))
                assert up["agents"] == []

        anyio.run(main)
        errlog.seek(0)
        assert errlog.read().startswith("agentctl mcp: not_running: agentd is not running")


def test_a_call_the_host_cancels_cancels_the_agents_turn(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    provider = HeldProvider()
    daemon.start(provider=provider)
    daemon.result("agent.show")
    provider.hold_call_after(0)

    async def main() -> None:
        async with mcp_session() as session:
            with anyio.move_on_after(60) as scope:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(session.call_tool, "send_message", {"text": "take your time"})
                    # Its model call, not just the turn: a cancel before the turn's input
                    # is on disk would leave nothing for the checks below.
                    await anyio.to_thread.run_sync(
                        wait_for, lambda: provider.holding, "the turn's model call"
                    )
                    tasks.cancel_scope.cancel()
            assert not scope.cancelled_caught, "the turn never started"
            wait_for(lambda: daemon.result("status")["active_turns"] == 0, "the turn to end")

    anyio.run(main)

    logs = [
        daemon.result("messages.list", {"conversation": c["id"]})["messages"]
        for c in daemon.result("conversation.list")["conversations"]
    ]
    [messages] = [log for log in logs if log]  # the session's own conversation
    assert [m["content"] for m in messages if m["role"] == "user"] == ["take your time"]
    assert (messages[0]["kind"], messages[0]["stop_reason"]) == ("stop", "cancelled")
    threading.Thread(target=provider.release).start()


def test_agentctl_starts_without_the_mcp_sdk_for_every_other_command(
    agent: dict[str, Any],
) -> None:
    probe = (
        "import sys, agentd.client as c\n"
        "for argv in (['status'], ['remember', 'likes tea'], ['memory', 'log']):\n"
        "    assert c.main(argv) == 0\n"
        "print(sorted(m for m in ('mcp', 'agentd.mcp', 'anyio', 'pydantic') if m in sys.modules),"
        " file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "[]"
