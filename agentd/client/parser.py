"""agentctl's command line: every command, its flags and help, and the handler it runs.

Apart from the handlers so the whole command-line surface (what ``agentctl --help`` and
the README document) reads in one place.
"""

from __future__ import annotations

import argparse
from typing import Any, get_args

from agentd.client.chat import cmd_chat
from agentd.client.commands import (
    cmd_agents,
    cmd_context,
    cmd_conversations,
    cmd_memory,
    cmd_messages,
    cmd_reflect,
    cmd_reflections,
    cmd_search,
    cmd_shutdown,
    cmd_sleeptime,
    cmd_status,
)
from shared import protocol


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentctl", description="Talk to the agentd daemon.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    def agent_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--agent", "-a", help="agent id or name (default: the default agent)")

    chat = command("chat", cmd_chat, "Chat with an agent (interactive without -p).")
    chat.add_argument("-p", "--prompt", help="send one message and print the answer")
    agent_flag(chat)
    chat.add_argument("--conversation", "-c", help="conversation id (default: the agent's)")
    chat.add_argument("--json", action="store_true", help="print the turn result as JSON")

    status = command("status", cmd_status, "Show the daemon's status.")
    status.add_argument("--json", action="store_true")

    agents = command("agents", cmd_agents, "List, create, show or update agents.")
    agents_sub = agents.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = agents_sub.add_parser("list", help="list agents")
    listing.add_argument("--json", action="store_true")
    create = agents_sub.add_parser("create", help="create an agent")
    create.add_argument("name")
    create.add_argument("--model", help="litellm model string (default: AGENTD_MODEL)")
    create.add_argument("--persona", help="text of system/persona.md")
    create.add_argument("--human", help="text of system/human.md")
    create.add_argument("--context-window", type=int)
    show = agents_sub.add_parser("show", help="show one agent")
    show.add_argument("agent", nargs="?")
    update = agents_sub.add_parser("update", help="change an agent")
    update.add_argument("agent")
    update.add_argument("--name")
    update.add_argument("--model")
    update.add_argument("--context-window", type=int)

    conversations = command("conversations", cmd_conversations, "List or start conversations.")
    conversations.add_argument("action", nargs="?", choices=("list", "new"), default="list")
    agent_flag(conversations)
    conversations.add_argument("--json", action="store_true")

    messages = command("messages", cmd_messages, "List a conversation's messages.")
    agent_flag(messages)
    messages.add_argument("--conversation", "-c")
    messages.add_argument(
        "--around",
        metavar="ID",
        help="the messages around this message id (with --before/--after N)",
    )
    messages.add_argument(
        "--before",
        help="only messages before this message id (with --around: how many before, default 5)",
    )
    messages.add_argument(
        "--after",
        help="only messages after this message id (with --around: how many after, default 5)",
    )
    messages.add_argument("--limit", type=int, default=20)
    messages.add_argument(
        "--order",
        choices=("asc", "desc"),
        default="desc",
        help="desc: the newest LIMIT messages; asc: the oldest",
    )
    messages.add_argument("--json", action="store_true")

    context = command("context", cmd_context, "Show a conversation's context budget.")
    agent_flag(context)
    context.add_argument("--conversation", "-c")
    context.add_argument("--json", action="store_true")

    search = command("search", cmd_search, "Search an agent's past messages (best first).")
    search.add_argument("query", help='words to find; "quoted phrases" must match')
    agent_flag(search)
    search.add_argument("--conversation", "-c", help="only this conversation")
    search.add_argument("--role", choices=("user", "assistant", "tool"))
    search.add_argument("--since", help="ISO date or time, inclusive (UTC unless given)")
    search.add_argument("--until", help="ISO date or time, inclusive (UTC unless given)")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--json", action="store_true")

    sleeptime = command(
        "sleeptime",
        cmd_sleeptime,
        "Show or set when an agent reflects (prints the resolved settings).",
    )
    agent_flag(sleeptime)
    sleeptime.add_argument("--trigger", choices=get_args(protocol.ReflectionTrigger))
    sleeptime.add_argument("--steps", type=int, help="with step-count: assistant steps between")
    sleeptime.add_argument("--merge", choices=get_args(protocol.MergeMode))

    reflect = command("reflect", cmd_reflect, "Ask for a reflection now (manual).")
    agent_flag(reflect)
    reflect.add_argument(
        "--conversation",
        "-c",
        action="append",
        help="a conversation to reflect on (repeatable; default: the agent's)",
    )
    reflect.add_argument("--recent", type=int, help="the N most recently active conversations")
    reflect.add_argument("--instruction", help="what to focus on")
    reflect.add_argument("--wait", action="store_true", help="wait for the outcome")
    reflect.add_argument("--timeout", type=float, default=600.0, help="with --wait, in seconds")

    reflections = command("reflections", cmd_reflections, "List an agent's reflection outcomes.")
    agent_flag(reflections)
    reflections.add_argument("--limit", type=int, default=20)
    reflections.add_argument("--json", action="store_true")

    memory = command(
        "memory", cmd_memory, "Look at an agent's memory repo, or commit edits made by hand."
    )
    memory.add_argument("action", choices=("log", "path", "show", "commit"))
    memory.add_argument("path", nargs="?", help="with show: one file, e.g. system/human.md")
    agent_flag(memory)
    memory.add_argument("--limit", type=int, default=20)
    memory.add_argument("-m", "--message", help="with commit: the commit message")

    command("shutdown", cmd_shutdown, "Stop the daemon.")
    return parser
