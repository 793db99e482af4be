"""How agentctl prints the daemon's answers for people (``--json`` prints them as they are).

Apart from the commands so the look of every output is in one place and a command reads
as the request it sends: these functions take an answer and print it, nothing else.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from shared import protocol

_PREVIEW_CHARS = 200

_REDIS_DOWN = {
    "restarting": "`agentd up` is restarting the embedded Valkey; reflections wait on disk "
    "and are sent when it answers",
    "not_started": "no `agentd up` runs for this home, only this daemon; reflections wait on "
    "disk (to run the whole stack: `agentctl shutdown`, then `agentd up`)",
    "unreachable": "reflections wait on disk; start that Redis or fix AGENTD_REDIS_URL",
}
"""What an unreachable Redis means, by the daemon's ``redis.state``."""


def one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW_CHARS else flat[: _PREVIEW_CHARS - 1] + "…"


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


def print_event(event: str, data: dict[str, Any]) -> None:
    """One event line of a running turn, as it happens."""
    if event == protocol.EVENT_TOOL_CALL:
        suffix = "  (awaiting approval)" if data.get("awaiting_approval") else ""
        print(f"  ⚙ {data['name']}({data['arguments']}){suffix}", flush=True)
    elif event == protocol.EVENT_TOOL_RESULT:
        mark = "✗" if data.get("is_error") else "✓"
        lines = (data.get("content") or "").strip().splitlines() or [""]
        more = f"  (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
        print(f"  {mark} {one_line(lines[0])}{more}", flush=True)
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


def print_status(status: dict[str, Any]) -> None:
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


def print_context(budget: dict[str, Any]) -> None:
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


def print_agents(agents: list[dict[str, Any]]) -> None:
    for agent in agents:
        print(f"{agent['id']}\t{agent['name']}\t{agent['effective_model']}")


def print_conversations(conversations: list[dict[str, Any]]) -> None:
    for conversation in conversations:
        marker = "*" if conversation["default"] else " "
        print(f"{marker} {conversation['id']}\t{conversation['created_at']}")


def print_messages(messages: list[dict[str, Any]], around: str | None) -> None:
    """One line per message; the message ``around`` (if any) is marked."""
    for message in messages:
        label = message["role"] if message.get("kind", "message") == "message" else message["kind"]
        text = message.get("content", "")
        calls = message.get("tool_calls") or []
        if calls:
            text = (text + " " if text else "") + " ".join(
                f"⚙ {c['name']}({c.get('arguments', '{}')})" for c in calls
            )
        marker = "◀ " if message["id"] == around else ""
        print(f"{message['created_at'][:19]}  {message['id']}  {label:<9} {marker}{one_line(text)}")


def print_hits(hits: list[dict[str, Any]]) -> None:
    for hit in hits:
        print(
            f"{hit['score']:.2f}\t{hit['conversation_id']}\t{hit['role']}\t{one_line(hit['text'])}"
        )


def print_reflections(reflections: list[dict[str, Any]]) -> None:
    for r in reflections:
        commits = ",".join(r["commits"]) or "-"
        print(
            f"{r['reflection_id']}\t{r['trigger']}\t{r['status']}\t{r.get('reason') or '-'}\t"
            f"{commits}\t{r['duration_s']:.1f}s\t{r['message']}"
        )


def print_memory_log(commits: list[dict[str, Any]]) -> None:
    for commit in commits:
        print(
            f"{commit['short_sha']}  {commit['date'][:19]}  {commit['author']}: {commit['subject']}"
        )


def print_memory_files(files: dict[str, str]) -> None:
    for path, text in files.items():
        print(f"── {path}\n{text.rstrip()}\n")
