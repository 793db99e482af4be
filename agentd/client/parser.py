"""agentctl's command line: every command, its flags and help, and the handler it runs.

Apart from the handlers so the whole command-line surface (what ``agentctl --help`` and
the README document) reads in one place.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, get_args

from agentd import __version__
from agentd.client import times
from agentd.client.api_keys import cmd_api_key
from agentd.client.approvals import cmd_approvals, cmd_approve, cmd_deny
from agentd.client.archive import cmd_export, cmd_import
from agentd.client.commands import (
    cmd_agents,
    cmd_context,
    cmd_conversations,
    cmd_memory,
    cmd_messages,
    cmd_reflect,
    cmd_reflection_settings,
    cmd_reflections,
    cmd_search,
    cmd_shutdown,
    cmd_status,
    cmd_web,
)
from agentd.client.delete import cmd_agent_delete
from agentd.client.mcp import cmd_mcp
from agentd.client.notes import cmd_forget, cmd_remember
from agentd.client.repl import cmd_chat
from shared import setting_choices

JSON_HELP = "print the daemon's answer as JSON (times in ISO 8601 with an offset)"


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the checks argparse cannot make alone; any usage error
    exits 2 with the usage, like argparse's own."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    arg = _ACTION_ARG.get(args.command)
    left_over = len(extras) == 1 and not extras[0].startswith("-")
    if arg is not None and getattr(args, arg) is None and left_over:
        # ``memory why -a ada pnpm``: argparse matches ACTION and its optional ARG only
        # when they stand together, so an option between them leaves ARG over.
        setattr(args, arg, extras.pop())
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command == "messages" and args.around is not None:
        for flag in ("before", "after"):
            value = getattr(args, flag)
            try:
                setattr(args, flag, count(0)(value) if value is not None else 5)
            except argparse.ArgumentTypeError as exc:
                args.usage_of.error(f"with --around, --{flag} is how many messages: {exc}")
    needed = _MEMORY_ARG.get(args.action, "") if args.command == "memory" else ""
    if needed and not args.path:
        args.usage_of.error(f"memory {args.action} needs {needed}")
    if args.command == "agents" and args.action == "update" and args.approve is not None:
        args.approve = _tools(args.approve, args.usage_of)
    if args.command == "search" and not args.query.strip():
        args.usage_of.error("search needs words to find")
    if args.command == "api-key" and args.action != "list" and not args.key:
        args.usage_of.error(f"api-key {args.action} needs NAME")
    return args


def _tools(given: list[str], usage: argparse.ArgumentParser) -> list[str]:
    """``--approve`` values as tool names: comma-separated, repeatable, ``none`` alone
    for no tool (the daemon checks that each is a tool)."""
    names = [name.strip() for value in given for name in value.split(",") if name.strip()]
    if names == ["none"]:
        return []
    if not names or "none" in names:
        usage.error("--approve takes tool names (bash, write_file, …) or none alone")
    return names


_ACTION_ARG = {"memory": "path", "conversations": "conversation"}
"""Commands that take an ACTION then an optional ARG: where each keeps its ARG."""

_MEMORY_ARG = {
    "blame": "a file, e.g. system/human.md",
    "why": "the text to look for",
    "revert": "the commit to undo (a sha from log, blame or why)",
    "accept": "the proposal to merge (an id from memory proposals)",
    "reject": "the proposal to drop (an id from memory proposals)",
}
"""The memory actions whose ARG is required, and what it is."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentctl", description="Talk to the agentd daemon.")
    parser.add_argument("--version", action="version", version=f"agentctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, handler: Any, help_text: str, aliases: tuple[str, ...] = ()
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, aliases=aliases)
        p.set_defaults(handler=handler, usage_of=p)
        return p

    def agent_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agent", "-a", help="agent id or name (default: the default agent)")

    chat = command("chat", cmd_chat, "Chat with an agent (interactive without -p).")
    chat.add_argument("-p", "--prompt", help="send one message and print the answer")
    agent_flag(chat)
    chat.add_argument("--conversation", "-c", help="conversation id (default: the agent's)")
    chat.add_argument("--json", action="store_true", help="print the turn result as JSON")

    status = command("status", cmd_status, "Show the daemon's status.")
    status.add_argument("--json", action="store_true", help=JSON_HELP)

    agents = command("agents", cmd_agents, "List, create, show or update agents.")
    agents_sub = agents.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = agents_sub.add_parser("list", help="list agents")
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    create = agents_sub.add_parser("create", help="create an agent")
    create.add_argument("name", help="its name (letters, digits, '_' or '-')")
    create.add_argument("--model", help="litellm model string (default: AGENTD_MODEL)")
    create.add_argument("--persona", help="text of system/persona.md")
    create.add_argument("--human", help="text of system/human.md")
    create.add_argument(
        "--context-window",
        type=count(1),
        metavar="TOKENS",
        help="the model's window in tokens, at least 1000 (default: as known for the model)",
    )
    create.add_argument("--json", action="store_true", help=f"print the new record; {JSON_HELP}")
    show = agents_sub.add_parser("show", help="show one agent")
    show.add_argument("agent", nargs="?", help="agent id or name (default: the default agent)")
    show.add_argument("--json", action="store_true", help=JSON_HELP)
    update = agents_sub.add_parser("update", help="change an agent")
    update.add_argument("agent", help="agent id or name")
    update.add_argument("--name", help="a new name")
    update.add_argument(
        "--model",
        help=f"litellm model string; {setting_choices.DEFAULT_MODEL!r}: back to AGENTD_MODEL",
    )
    update.add_argument(
        "--context-window",
        type=count(1),
        metavar="TOKENS",
        help="the model's window in tokens, at least 1000",
    )
    update.add_argument(
        "--approve",
        action="append",
        metavar="TOOLS",
        help="the tools whose every call waits for your yes, e.g. bash or bash,write_file "
        "(repeatable; replaces the list); none: no tool waits",
    )
    update.add_argument("--json", action="store_true", help=f"print the record; {JSON_HELP}")
    delete = agents_sub.add_parser(
        "delete", help="delete an agent (moved to $AGENTD_HOME/trash, not erased)"
    )
    delete.add_argument("agent", help="agent id or name")
    delete.add_argument(
        "--yes", "-y", action="store_true", help="do not ask (needed off a terminal)"
    )
    delete.set_defaults(handler=cmd_agent_delete)

    conversations = command("conversations", cmd_conversations, "List or start conversations.")
    conversations.add_argument(
        "action",
        nargs="?",
        choices=("list", "new", "delete"),
        default="list",
        help="list (the default; * marks the agent's default), new (prints its id) or "
        "delete ID (moved to $AGENTD_HOME/trash, not erased)",
    )
    conversations.add_argument("conversation", nargs="?", help="with delete: the conversation id")
    conversations.add_argument(
        "--yes", "-y", action="store_true", help="with delete: do not ask (needed off a terminal)"
    )
    agent_flag(conversations)
    conversations.add_argument("--json", action="store_true", help=JSON_HELP)

    messages = command("messages", cmd_messages, "List a conversation's messages.")
    agent_flag(messages)
    messages.add_argument("--conversation", "-c", help="conversation id (default: the agent's)")
    messages.add_argument(
        "--around",
        metavar="ID",
        help="the messages around this message id, in any conversation of the agent "
        "(with --before/--after N)",
    )
    messages.add_argument(
        "--before",
        metavar="ID",
        help="the messages right before this message id (with --around: how many before, "
        "default 5)",
    )
    messages.add_argument(
        "--after",
        metavar="ID",
        help="the messages right after this message id (with --around: how many after, default 5)",
    )
    messages.add_argument(
        "--limit", type=count(1), default=20, help="at most this many (default 20)"
    )
    messages.add_argument(
        "--order",
        choices=("asc", "desc"),
        default="desc",
        help="desc (default): newest first, from the newest (or from --before/--after); "
        "asc: oldest first, from the oldest",
    )
    messages.add_argument("--json", action="store_true", help=JSON_HELP)

    context = command("context", cmd_context, "Show a conversation's context budget.")
    agent_flag(context)
    context.add_argument("--conversation", "-c", help="conversation id (default: the agent's)")
    context.add_argument("--json", action="store_true", help=JSON_HELP)

    search = command("search", cmd_search, "Search an agent's past messages (best first).")
    search.add_argument("query", help='words to find; "quoted phrases" must match')
    agent_flag(search)
    search.add_argument("--conversation", "-c", help="only this conversation")
    search.add_argument(
        "--role", choices=("user", "assistant", "tool"), help="only messages of this role"
    )
    search.add_argument(
        "--since", type=times.since, metavar="TIME", help=f"from this time on: {times.ZONE_HELP}"
    )
    search.add_argument(
        "--until", type=times.until, metavar="TIME", help=f"up to this time: {times.ZONE_HELP}"
    )
    search.add_argument("--limit", type=count(1), default=10, help="at most this many hits")
    search.add_argument("--json", action="store_true", help=JSON_HELP)

    # ``sleeptime`` is the name the seeds' walkthrough (mini-letta) used: kept as an alias.
    settings = command(
        "reflection-settings",
        cmd_reflection_settings,
        "Show or set when an agent reflects (prints the resolved settings).",
        aliases=("sleeptime",),
    )
    agent_flag(settings)
    settings.add_argument(
        "--trigger",
        choices=get_args(setting_choices.ReflectionTrigger),
        help="off; step-count: every --steps assistant steps; compaction-event: after a compaction",
    )
    settings.add_argument("--steps", type=count(1), help="with step-count: assistant steps between")
    settings.add_argument(
        "--merge",
        choices=get_args(setting_choices.MergeMode),
        help="auto: merge a reflection at once; explicit: wait for the agent's review",
    )

    reflect = command("reflect", cmd_reflect, "Ask for a reflection now (manual).")
    agent_flag(reflect)
    reflect.add_argument(
        "--conversation",
        "-c",
        action="append",
        help="a conversation to reflect on (repeatable; default: the agent's)",
    )
    reflect.add_argument("--recent", type=count(1), help="the N most recently active conversations")
    reflect.add_argument("--instruction", help="what to focus on")
    reflect.add_argument("--wait", action="store_true", help="wait for the outcome")
    reflect.add_argument("--timeout", type=float, default=600.0, help="with --wait, in seconds")

    reflections = command("reflections", cmd_reflections, "List an agent's reflection outcomes.")
    agent_flag(reflections)
    reflections.add_argument(
        "--limit", type=count(1), default=20, help="the newest N outcomes (default 20)"
    )
    reflections.add_argument("--json", action="store_true", help=JSON_HELP)

    memory = command(
        "memory",
        cmd_memory,
        "Look at an agent's memory repo and where its lines came from, commit edits made by "
        "hand, or undo a change.",
    )
    memory.add_argument(
        "action",
        choices=(
            "log",
            "path",
            "show",
            "edit",
            "commit",
            "blame",
            "why",
            "diff",
            "revert",
            "proposals",
            "accept",
            "reject",
        ),
        help="log: its history; path: where it is; show: its files; edit: edit one file in "
        "$VISUAL/$EDITOR and commit it; commit: commit edits made in the checkout; blame: "
        "each line of a file with the commit that wrote it (turn, reflection, user, merge); "
        "why: the lines containing TEXT, each with its commit and the messages it came from; "
        "diff: what changed since REV (default: since the conversation's previous turn ended, "
        "i.e. what its next turn will be told changed); revert: undo COMMIT as the user; "
        "proposals: the reflections held for you (they delete or empty a system/ file, or "
        "remove much of memory), each with its diff; accept ID: merge one; reject ID: drop it",
    )
    memory.add_argument(
        "path",
        nargs="?",
        metavar="ARG",
        help="with show, edit or blame: one file, e.g. system/human.md; with why: TEXT; with "
        "diff: REV (a sha or HEAD~N); with revert: COMMIT (a sha from log, blame or why); "
        "with accept or reject: ID (from memory proposals)",
    )
    agent_flag(memory)
    memory.add_argument(
        "--conversation",
        "-c",
        help="with diff: the conversation whose previous turn it starts from (default: the "
        "agent's)",
    )
    memory.add_argument(
        "--limit", type=count(1), default=20, help="with log: the newest N commits (default 20)"
    )
    memory.add_argument("-m", "--message", help="with edit or commit: the commit message")
    memory.add_argument(
        "--json",
        action="store_true",
        help=f"with log, path, blame, why, diff or proposals: {JSON_HELP}",
    )

    remember = command(
        "remember",
        cmd_remember,
        "Add a note to an agent's memory: one `- ` line, committed (provenance: you, via "
        "agentctl).",
    )
    remember.add_argument("text", help="the note (made one line)")
    agent_flag(remember)
    remember.add_argument(
        "--file",
        metavar="PATH",
        help="the memory file it goes to (default: system/human.md, what the agent knows "
        "about you, shown in every prompt); a new .md file is created",
    )
    remember.add_argument("--json", action="store_true", help=JSON_HELP)
    forget = command(
        "forget",
        cmd_forget,
        "Show the memory lines containing PATTERN and, once you say yes, remove them in one "
        "commit (`agentctl memory revert` undoes it).",
    )
    forget.add_argument("pattern", help="text the lines contain (case-insensitive, not a regex)")
    agent_flag(forget)
    forget.add_argument("--file", metavar="PATH", help="only this memory file's lines")
    forget.add_argument(
        "--yes", "-y", action="store_true", help="do not ask (needed off a terminal)"
    )
    forget.add_argument("--json", action="store_true", help=JSON_HELP)

    mcp = command(
        "mcp",
        cmd_mcp,
        "Serve the Model Context Protocol on stdin/stdout, for MCP hosts (Claude Desktop, "
        "Cursor, …) to configure as a command; it talks to the running daemon.",
    )
    mcp.add_argument(
        "--agent",
        "-a",
        help="the agent tools use when a call names none (default: the default agent)",
    )
    mcp.set_defaults(connects=False)

    export = command(
        "export", cmd_export, "Write an agent (record, memory history, transcripts) as a .tar.gz."
    )
    agent_flag(export)
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (default: stdout, redirected)"
    )

    import_ = command("import", cmd_import, "Restore an agent from an export archive.")
    import_.add_argument("file", help="the archive (.tar.gz from agentctl export; - for stdin)")
    import_.add_argument(
        "--keep-id",
        action="store_true",
        help="keep the agent's id (refused if it exists); default: a new id",
    )
    import_.add_argument("--name", help="its name here (default: the archive's; must be free)")

    approvals = command(
        "approvals", cmd_approvals, "List the tool calls waiting for your approval."
    )
    approvals.add_argument("--agent", "-a", help="only this agent's (default: every agent's)")
    approvals.add_argument("--json", action="store_true", help=JSON_HELP)
    approve = command(
        "approve", cmd_approve, "Approve a waiting tool call: it runs and the turn goes on."
    )
    approve.add_argument("approval", metavar="ID", help="its id, as `agentctl approvals` shows")
    approve.add_argument("--json", action="store_true", help="print the turn result as JSON")
    deny = command(
        "deny", cmd_deny, "Deny a waiting tool call: the model is told, and the turn goes on."
    )
    deny.add_argument("approval", metavar="ID", help="its id, as `agentctl approvals` shows")
    deny.add_argument("--reason", "-r", help="why: the model is given it with the denial")
    deny.add_argument("--json", action="store_true", help="print the turn result as JSON")

    web = command(
        "web", cmd_web, "Print a one-time login link to the web view (and open a browser)."
    )
    web.add_argument(
        "--no-browser", action="store_true", help="only print the link, even on a terminal"
    )

    api_key = command(
        "api-key",
        cmd_api_key,
        "Make, list or revoke the bearer keys of the OpenAI-compatible endpoint.",
    )
    api_key.add_argument(
        "action",
        choices=("create", "list", "revoke"),
        help="create NAME: a new key, printed once; list: every key (never the key itself); "
        "revoke KEY: by name or id, at once",
    )
    api_key.add_argument("key", nargs="?", metavar="NAME", help="with create or revoke")
    api_key.add_argument("--json", action="store_true", help=JSON_HELP)

    command("shutdown", cmd_shutdown, "Stop the daemon.")
    return parser
