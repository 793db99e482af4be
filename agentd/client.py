"""agentctl: the thin client. Parse arguments, send one request, print, exit.

Imports only the standard library and ``shared.protocol`` (never pydantic, litellm,
Celery or git) so it starts in tens of milliseconds. Exit codes: 0 ok, 1 error (the
daemon's typed error is printed as ``code: message``), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import sys
from collections.abc import Iterator
from typing import Any, get_args

from shared import protocol

_PREVIEW_CHARS = 200


class ClientError(Exception):
    """An error to print as ``code: message`` with exit status 1."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Connection:
    def __init__(self) -> None:
        self._open()
        self._next_id = 0

    def _open(self) -> None:
        path = protocol.socket_path()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            self.sock.close()
            raise ClientError(
                "not_running",
                f"agentd is not running (no daemon on {path}). Start it with `agentd up` "
                "(from a checkout: `make up`), then try again.",
            ) from None
        self.reader = self.sock.makefile("rb")

    def call(self, op: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Send one request; yield its event lines, then its final line."""
        if self._closed_by_daemon():
            self.close()
            self._open()
        self._next_id += 1
        request_id = f"c{os.getpid()}-{self._next_id}"
        with contextlib.suppress(BrokenPipeError):  # a daemon that refused us said why
            self.sock.sendall(protocol.request(request_id, op, _drop_none(params or {})))
        for raw in self.reader:
            message = json.loads(raw)
            if message.get("id") not in (request_id, None):
                continue
            yield message
            if "ok" in message:
                return
        raise ClientError("disconnected", "agentd closed the connection before answering")

    def result(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        for message in self.call(op, params):
            if "ok" in message:
                return _unwrap(message)
        raise AssertionError("call() always ends with a final line")

    def _closed_by_daemon(self) -> bool:
        """Between requests nothing is due, so a readable socket has reached its end: the
        daemon closes a connection idle for ``AGENTD_IDLE_TIMEOUT_S``, and the interactive
        chat is idle while its user types."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        """Close quietly: the answer is in, and a daemon that is stopping may have reset
        the connection already."""
        with contextlib.suppress(OSError):
            self.reader.close()
            self.sock.close()


def _unwrap(message: dict[str, Any]) -> dict[str, Any]:
    if message["ok"]:
        return message["result"]
    error = message.get("error") or {}
    raise ClientError(error.get("code", "error"), error.get("message", "unknown error"))


def _drop_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


# --- rendering ---------------------------------------------------------------------------


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW_CHARS else flat[: _PREVIEW_CHARS - 1] + "…"


def _print_event(event: str, data: dict[str, Any]) -> None:
    if event == protocol.EVENT_TOOL_CALL:
        suffix = "  (awaiting approval)" if data.get("awaiting_approval") else ""
        print(f"  ⚙ {data['name']}({data['arguments']}){suffix}", flush=True)
    elif event == protocol.EVENT_TOOL_RESULT:
        mark = "✗" if data.get("is_error") else "✓"
        lines = (data.get("content") or "").strip().splitlines() or [""]
        more = f"  (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
        print(f"  {mark} {_one_line(lines[0])}{more}", flush=True)
    elif event == protocol.EVENT_ASSISTANT:
        print(data["text"], flush=True)
    elif event == protocol.EVENT_COMPACTION:
        print(
            f"  ⇣ compacted ({data['trigger']}): {data['messages_before']} → "
            f"{data['messages_after']} messages, ~{data['tokens_before']} → "
            f"~{data['tokens_after']} tokens",
            flush=True,
        )
    elif event == protocol.EVENT_REFLECTION:
        print(f"  {data['line']}", flush=True)
    elif event == protocol.EVENT_MEMORY_UPDATE:
        print("  ↻ memory changed — injected <memory_update> reminder", flush=True)
    elif event == protocol.EVENT_WAITING:
        print(f"  … waiting: {data.get('reason', 'busy')}", file=sys.stderr, flush=True)


def _chat_once(conn: Connection, args: argparse.Namespace, text: str) -> int:
    params = {"agent": args.agent, "conversation": args.conversation, "text": text}
    for message in conn.call("chat", params):
        if "event" in message:
            if not args.json:
                _print_event(message["event"], message.get("data", {}))
            continue
        result = _unwrap(message)
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        stop = result["stop_reason"]
        if stop == "error":
            error = result.get("error") or {}
            print(f"{error.get('code', 'error')}: {error.get('message', '')}", file=sys.stderr)
            return 1
        if stop not in ("end_turn",) and not args.json:
            print(f"  ■ turn stopped: {stop}", file=sys.stderr)
        return 0
    return 1


def cmd_chat(conn: Connection, args: argparse.Namespace) -> int:
    if args.prompt is not None:
        return _chat_once(conn, args, args.prompt)
    status = 0
    while True:
        try:
            text = input("› ")
        except EOFError:
            print()
            return status
        if text.strip() in ("/exit", "/quit"):
            return status
        if text.strip():
            status = _chat_once(conn, args, text)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


_REDIS_DOWN = {
    "restarting": "`agentd up` is restarting the embedded Valkey; reflections wait on disk "
    "and are sent when it answers",
    "not_started": "no `agentd up` runs for this home, only this daemon; reflections wait on "
    "disk (to run the whole stack: `agentctl shutdown`, then `agentd up`)",
    "unreachable": "reflections wait on disk; start that Redis or fix AGENTD_REDIS_URL",
}
"""What an unreachable Redis means, by the daemon's ``redis.state``."""


def cmd_status(conn: Connection, args: argparse.Namespace) -> int:
    status = conn.result("status")
    if args.json:
        _print_json(status)
        return 0
    print(
        f"agentd {status['version']}  pid {status['pid']}  up {status['uptime_s']:.0f} s  "
        f"ready  model {status['model']}  active turns {status['active_turns']}"
    )
    print(f"home     {status['home']}")
    redis = status["redis"]
    kind = "embedded" if redis["embedded"] else "external"
    if redis["reachable"]:
        print(
            f"redis    {kind}, reachable ({redis['latency_ms']} ms)  queue "
            f"{redis['queue_depth']}  running {len(redis['reflections_running'])}"
        )
    else:
        print(f"redis    {kind}, NOT reachable: {_REDIS_DOWN[redis['state']]}")
    names = ", ".join(w["name"] for w in redis["workers"]) or "none"
    print(f"workers  {len(redis['workers'])}: {names}")
    for agent in status["agents"]:
        settings = agent["reflection"]
        trigger = settings["trigger"] + (
            f" every {settings['stepCount']}" if settings["trigger"] == "step-count" else ""
        )
        last = agent["last_reflection"]
        last_text = f"{last['status']} at {last['finished_at'][:19]}" if last else "never"
        extra = f"  backoff until {agent['backoff_until'][:19]}" if agent["backoff_until"] else ""
        print(
            f"agent    {agent['name']} ({agent['id']})  {trigger}  "
            f"{agent['steps_since_last_reflection']} steps since  last {last_text}{extra}"
        )
    return 0


def cmd_context(conn: Connection, args: argparse.Namespace) -> int:
    budget = conn.result("context.show", {"agent": args.agent, "conversation": args.conversation})
    if args.json:
        _print_json(budget)
        return 0
    room = budget["threshold"] - budget["request_tokens"]
    position = f"{room:,} under the threshold" if room >= 0 else f"{-room:,} over the threshold"
    counted = "provider-reported usage + estimates" if budget["anchored"] else "estimated"
    print(f"model       {budget['model']}")
    print(f"window      {budget['window']:>9,} tokens")
    print(f"threshold   {budget['threshold']:>9,} tokens (compaction starts above this)")
    print(
        f"floor       {budget['floor']:>9,} tokens (system {budget['system_tokens']:,} + "
        f"tools {budget['tools_tokens']:,})"
    )
    print(f"messages    {budget['messages']:>9,} in the window")
    print(f"request     ~{budget['request_tokens']:,} tokens ({counted}; {position})")
    last = budget.get("last_compaction")
    if last:
        print(
            f"last compaction: {last['trigger']} at {last['at'][:19]}, "
            f"{last['messages_before']} → {last['messages_after']} messages, "
            f"~{last['tokens_before']} → ~{last['tokens_after']} tokens"
        )
    return 0


def cmd_agents(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "list":
        agents = conn.result("agent.list")["agents"]
        if args.json:
            _print_json(agents)
        for agent in [] if args.json else agents:
            print(f"{agent['id']}\t{agent['name']}\t{agent['effective_model']}")
        return 0
    if args.action == "create":
        params = {
            "name": args.name,
            "model": args.model,
            "persona": args.persona,
            "human": args.human,
            "context_window": args.context_window,
        }
        _print_json(conn.result("agent.create", params))
        return 0
    if args.action == "update":
        params = {
            "agent": args.agent,
            "name": args.name,
            "model": args.model,
            "context_window": args.context_window,
        }
        _print_json(conn.result("agent.update", params))
        return 0
    _print_json(conn.result("agent.show", {"agent": args.agent}))
    return 0


def cmd_conversations(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "new":
        print(conn.result("conversation.create", {"agent": args.agent})["id"])
        return 0
    result = conn.result("conversation.list", {"agent": args.agent})
    if args.json:
        _print_json(result["conversations"])
        return 0
    for conversation in result["conversations"]:
        marker = "*" if conversation["default"] else " "
        print(f"{marker} {conversation['id']}\t{conversation['created_at']}")
    return 0


def _page_of_messages(conn: Connection, args: argparse.Namespace) -> list[dict[str, Any]]:
    if not args.around:
        params = {
            "agent": args.agent,
            "conversation": args.conversation,
            "before": args.before,
            "after": args.after,
            "limit": args.limit,
            "order": args.order,
        }
        return conn.result("messages.list", params)["messages"]
    try:
        before = 5 if args.before is None else int(args.before)
        after = 5 if args.after is None else int(args.after)
    except ValueError:
        raise ClientError("usage", "with --around, --before and --after are counts") from None
    params = {"agent": args.agent, "message_id": args.around, "before": before, "after": after}
    return conn.result("messages.around", params)["messages"]


def cmd_messages(conn: Connection, args: argparse.Namespace) -> int:
    messages = _page_of_messages(conn, args)
    if args.json:
        _print_json(messages)
        return 0
    for message in messages:
        label = message["role"] if message.get("kind", "message") == "message" else message["kind"]
        text = message.get("content", "")
        calls = message.get("tool_calls") or []
        if calls:
            text = (text + " " if text else "") + " ".join(
                f"⚙ {c['name']}({c.get('arguments', '{}')})" for c in calls
            )
        marker = "◀ " if message["id"] == args.around else ""
        print(
            f"{message['created_at'][:19]}  {message['id']}  {label:<9} {marker}{_one_line(text)}"
        )
    return 0


def cmd_sleeptime(conn: Connection, args: argparse.Namespace) -> int:
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
    reflections = conn.result("reflection.list", {"agent": args.agent, "limit": args.limit})
    if args.json:
        _print_json(reflections["reflections"])
        return 0
    for r in reflections["reflections"]:
        commits = ",".join(r["commits"]) or "-"
        print(
            f"{r['reflection_id']}\t{r['trigger']}\t{r['status']}\t{r.get('reason') or '-'}\t"
            f"{commits}\t{r['duration_s']:.1f}s\t{r['message']}"
        )
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
    hits = conn.result("recall.search", params)["hits"]
    if args.json:
        _print_json(hits)
        return 0
    for hit in hits:
        print(
            f"{hit['score']:.2f}\t{hit['conversation_id']}\t{hit['role']}\t{_one_line(hit['text'])}"
        )
    return 0


def cmd_memory(conn: Connection, args: argparse.Namespace) -> int:
    if args.action == "path":
        print(conn.result("memory.path", {"agent": args.agent})["path"])
    elif args.action == "log":
        commits = conn.result("memory.log", {"agent": args.agent, "limit": args.limit})["commits"]
        for commit in commits:
            print(
                f"{commit['short_sha']}  {commit['date'][:19]}  {commit['author']}: "
                f"{commit['subject']}"
            )
    elif args.action == "commit":
        params = {"agent": args.agent, **({"message": args.message} if args.message else {})}
        commit = conn.result("memory.commit", params)["commit"]
        print(f"committed {commit[:7]}" if commit else "nothing to commit")
    elif args.path:
        print(conn.result("memory.show", {"agent": args.agent, "path": args.path})["text"], end="")
    else:
        files = conn.result("memory.show", {"agent": args.agent})["files"]
        for path, text in files.items():
            print(f"── {path}\n{text.rstrip()}\n")
    return 0


def cmd_shutdown(conn: Connection, _args: argparse.Namespace) -> int:
    conn.result("shutdown")
    print("agentd is stopping")
    return 0


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        conn = Connection()
        try:
            return args.handler(conn, args)
        finally:
            conn.close()
    except ClientError as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except (BrokenPipeError, ConnectionResetError):
        print("disconnected: agentd closed the connection", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
