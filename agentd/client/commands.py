"""Every agentctl command but ``chat``: which request it sends, and which answer it prints.

Apart from the parser (which only names commands and flags) and the renderers (which only
print) so each command reads as the request it makes and the choice between ``--json``
and the readable form.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentd.client import render
from agentd.client.connection import Connection
from agentd.client.delete import cmd_conversation_delete
from agentd.client.memory_edit import cmd_memory_edit


def cmd_status(conn: Connection, args: argparse.Namespace) -> int:
    status = conn.result("status")
    if args.json:
        render.print_json(status)
    else:
        render.print_status(status)
    return 0


def cmd_context(conn: Connection, args: argparse.Namespace) -> int:
    budget = conn.result("context.show", {"agent": args.agent, "conversation": args.conversation})
    if args.json:
        render.print_json(budget)
    else:
        render.print_context(budget)
    return 0


def cmd_agents(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "list":
        agents = conn.result("agent.list")["agents"]
        if args.json:
            render.print_json(agents)
        else:
            render.print_agents(agents)
        return 0
    if args.action == "create":
        params = {
            "name": args.name,
            "model": args.model,
            "persona": args.persona,
            "human": args.human,
            "context_window": args.context_window,
        }
        _print_record(conn.result("agent.create", params), "created", as_json=args.json)
        return 0
    if args.action == "update":
        params = {
            "agent": args.agent,
            "name": args.name,
            "model": args.model,
            "context_window": args.context_window,
            "requires_approval": args.approve,
        }
        _print_record(conn.result("agent.update", params), "updated", as_json=args.json)
        return 0
    agent = conn.result("agent.show", {"agent": args.agent})
    if args.json:
        render.print_json(agent)
    else:
        render.print_agent(agent)
    return 0


def _print_record(agent: dict[str, Any], done: str, *, as_json: bool) -> None:
    """The whole record with ``--json``; else what ``agents show`` prints (the system
    prompt, pages of memory, is left to ``memory show``)."""
    if as_json:
        render.print_json(agent)
        return
    print(f"{done} agent {agent['name']}")
    render.print_agent(agent)


def cmd_conversations(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "delete":
        return cmd_conversation_delete(conn, args)
    if args.action == "new":
        print(conn.result("conversation.create", {"agent": args.agent})["id"])
        return 0
    conversations = conn.result("conversation.list", {"agent": args.agent})["conversations"]
    if args.json:
        render.print_json(conversations)
    else:
        render.print_conversations(conversations)
    return 0


def _page_of_messages(conn: Connection, args: argparse.Namespace) -> list[dict[str, Any]]:
    """With ``--around``, ``--before``/``--after`` are counts (the parser made them so)."""
    if args.around is None:
        params = {
            "agent": args.agent,
            "conversation": args.conversation,
            "before": args.before,
            "after": args.after,
            "limit": args.limit,
            "order": args.order,
        }
        return conn.result("messages.list", params)["messages"]
    params = {
        "agent": args.agent,
        "message_id": args.around,
        "before": args.before,
        "after": args.after,
    }
    return conn.result("messages.around", params)["messages"]


def cmd_messages(conn: Connection, args: argparse.Namespace) -> int:
    messages = _page_of_messages(conn, args)
    if args.json:
        render.print_json(messages)
    else:
        render.print_messages(messages, around=args.around)
    return 0


def cmd_reflection_settings(conn: Connection, args: argparse.Namespace) -> int:
    params = {
        "agent": args.agent,
        "trigger": args.trigger,
        "step_count": args.steps,
        "merge": args.merge,
    }
    print(
        json.dumps(
            conn.result("reflection.settings", params), ensure_ascii=False, separators=(",", ":")
        )
    )
    return 0


def cmd_reflect(conn: Connection, args: argparse.Namespace) -> int:
    params = {
        "agent": args.agent,
        "conversations": args.conversation or None,
        "recent": args.recent,
        "instruction": args.instruction,
        "wait_s": args.timeout if args.wait else 0,
    }
    result = conn.result("reflection.request", params)
    outcome = result.get("outcome")
    if outcome is None:
        if not result["queued"]:
            print(
                f"reflection {result['request_id']} is recorded but Redis is not reachable: "
                "it is sent when the stack is up (`agentd up`)"
            )
            return 1
        suffix = "" if not args.wait else f" (no outcome within {args.timeout:.0f} s)"
        print(f"reflection requested: {result['request_id']}{suffix}")
        return 1 if args.wait else 0
    print(f"  {outcome['line']}")
    return 1 if outcome["status"] == "failed" else 0


def cmd_reflections(conn: Connection, args: argparse.Namespace) -> int:
    params = {"agent": args.agent, "limit": args.limit}
    reflections = conn.result("reflection.list", params)["reflections"]
    if args.json:
        render.print_json(reflections)
    else:
        render.print_reflections(reflections)
    return 0


def cmd_search(conn: Connection, args: argparse.Namespace) -> int:
    params = {
        "agent": args.agent,
        "query": args.query,
        "conversation": args.conversation,
        "role": args.role,
        "since": args.since,
        "until": args.until,
        "limit": args.limit,
    }
    found = conn.result("recall.search", params)
    if found.get("incomplete"):
        render.print_incomplete(found["incomplete"])
    if args.json:
        render.print_json(found["hits"])
    else:
        render.print_hits(found["hits"])
    return 0


def cmd_memory(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "path":
        found = conn.result("memory.path", {"agent": args.agent})
        if args.json:
            render.print_json(found)
        else:
            print(found["path"])
    elif args.action == "log":
        commits = conn.result("memory.log", {"agent": args.agent, "limit": args.limit})["commits"]
        if args.json:
            render.print_json(commits)
        else:
            render.print_memory_log(commits)
    elif args.action == "edit":
        return cmd_memory_edit(conn, args)
    elif args.action == "commit":
        params = {"agent": args.agent, **({"message": args.message} if args.message else {})}
        commit = conn.result("memory.commit", params)["commit"]
        print(f"committed {commit[:7]}" if commit else "nothing to commit")
    elif args.action in _MEMORY_HISTORY:
        return _MEMORY_HISTORY[args.action](conn, args)
    elif args.path:
        print(conn.result("memory.show", {"agent": args.agent, "path": args.path})["text"], end="")
    else:
        render.print_memory_files(conn.result("memory.show", {"agent": args.agent})["files"])
    return 0


def _memory_blame(conn: Connection, args: argparse.Namespace) -> int:
    blamed = conn.result("memory.blame", {"agent": args.agent, "path": args.path})
    if args.json:
        render.print_json(blamed["lines"])
    else:
        render.print_blame(blamed["lines"])
    return 0


def _memory_why(conn: Connection, args: argparse.Namespace) -> int:
    found = conn.result("memory.why", {"agent": args.agent, "text": args.path})
    if found.get("incomplete"):
        render.print_incomplete(found["incomplete"])
    if args.json:
        render.print_json(found["matches"])
    else:
        render.print_why(found["matches"], found["more"])
    return 0


def _memory_diff(conn: Connection, args: argparse.Namespace) -> int:
    params = {"agent": args.agent, "conversation": args.conversation, "rev": args.path}
    diff = conn.result("memory.diff", params)
    if args.json:
        render.print_json(diff)
    else:
        render.print_memory_diff(diff)
    return 0


def _memory_revert(conn: Connection, args: argparse.Namespace) -> int:
    done = conn.result("memory.revert", {"agent": args.agent, "commit": args.path})
    render.print_reverted(done)
    return 0


def _memory_proposals(conn: Connection, args: argparse.Namespace) -> int:
    held = conn.result("memory.proposals", {"agent": args.agent})
    if args.json:
        render.print_json(held["proposals"])
    else:
        render.print_proposals(held)
    return 0


def _memory_answer(conn: Connection, args: argparse.Namespace) -> int:
    answered = conn.result(f"memory.{args.action}", {"agent": args.agent, "proposal": args.path})
    render.print_answered(answered)
    return 0


_MEMORY_HISTORY = {
    "blame": _memory_blame,
    "why": _memory_why,
    "diff": _memory_diff,
    "revert": _memory_revert,
    "proposals": _memory_proposals,
    "accept": _memory_answer,
    "reject": _memory_answer,
}
"""``agentctl memory blame|why|diff|revert``: the requests of :mod:`agentd.memory.history`;
``proposals|accept|reject``: those of :mod:`agentd.memory.proposals`."""


def cmd_web(conn: Connection, args: argparse.Namespace) -> int:
    """The link is printed even when a browser opens: a browser on another display, or
    none at all (a server over ssh), still needs it."""
    login = conn.result("web.login")
    print(login["url"])
    print(
        f"The link logs in once, within {login['expires_s']:.0f} s; run `agentctl web` "
        "again for another.",
        file=sys.stderr,
    )
    if not args.no_browser and sys.stdout.isatty():
        _open_in_browser(login["url"])
    return 0


def _open_in_browser(url: str) -> None:
    """Open ``url`` in a graphical browser, if one is registered. A text browser (lynx,
    w3m: what ``webbrowser`` falls back to without a display) would take over this
    terminal and cannot run the page's scripts, so it is not used."""
    import webbrowser  # here: only this command needs it

    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return
    if not isinstance(browser, webbrowser.GenericBrowser) or isinstance(
        browser, webbrowser.BackgroundBrowser
    ):
        browser.open(url)


def cmd_shutdown(conn: Connection, _args: argparse.Namespace) -> int:
    conn.result("shutdown")
    print("agentd is stopping")
    return 0
