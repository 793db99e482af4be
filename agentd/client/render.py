"""How agentctl prints the daemon's answers for people (``--json`` prints them as they are).

Apart from the commands so the look of every output is in one place and a command reads
as the request it sends: these functions take an answer and print it, nothing else.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentd.client.times import shown
from shared import message_refs, protocol

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


def print_chat_banner(agent_name: str, where: dict[str, Any]) -> None:
    """Who the interactive chat talks to (``where`` is a ``context.show`` answer)."""
    print(
        f"{agent_name} · conversation {where['conversation_id']} · model {where['model']}"
        "  (/help for commands)",
        flush=True,
    )


def print_event(event: str, data: dict[str, Any]) -> None:
    """One event line of a running turn, as it happens (the reply's own text is printed
    as it streams, by :mod:`.live`)."""
    if event == protocol.EVENT_TOOL_CALL:
        waits = data.get("awaiting_approval")
        suffix = f"  (awaiting approval {message_refs.short_id(waits)})" if waits else ""
        print(f"  ⚙ {data['name']}({data['arguments']}){suffix}", flush=True)
    elif event == protocol.EVENT_TOOL_RESULT:
        mark = "✗" if data.get("is_error") else "✓"
        lines = (data.get("content") or "").strip().splitlines() or [""]
        more = f"  (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
        print(f"  {mark} {one_line(lines[0])}{more}", flush=True)
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
    elif event == protocol.EVENT_PROVIDER_RETRY:
        print(
            f"  … retrying in {data['delay_s']:.0f} s ({data['reason']})",
            file=sys.stderr,
            flush=True,
        )
    elif event == protocol.EVENT_WARNING:
        print(f"  ! {data['message']}", file=sys.stderr, flush=True)


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
    names = ", ".join(_worker(w) for w in redis["workers"]) or "none"
    print(f"workers  {len(redis['workers'])}: {names}")
    waiting = sum(agent.get("approvals_waiting", 0) for agent in status["agents"])
    print(f"approvals {_calls(waiting)}" + (": `agentctl approvals`" if waiting else ""))
    for agent in status["agents"]:
        settings = agent["reflection"]
        trigger = settings["trigger"] + (
            f" every {settings['stepCount']}" if settings["trigger"] == "step-count" else ""
        )
        last = agent["last_reflection"]
        last_text = "never"
        if last:
            why = f" ({last['reason']})" if last.get("reason") else ""
            last_text = f"{last['status']}{why} at {shown(last['finished_at'])}"
        backoff = agent["backoff_until"]
        extra = f"  backoff until {shown(backoff)}" if backoff else ""
        print(
            f"agent    {agent['name']} ({agent['id']})  {trigger}  "
            f"{agent['steps_since_last_reflection']} steps since  last {last_text}{extra}"
        )
        if agent.get("uncommitted_notice"):
            print(f"         ! {agent['uncommitted_notice']}")
        for held in agent.get("held_proposals") or []:
            print(
                f"         ! reflection {held['id']} is held for you: {held['why']}; review it "
                f"with `agentctl memory proposals --agent {agent['name']}`"
            )
        if agent.get("reflection_paused"):
            print(f"         ! {agent['reflection_paused']['text']}")
        if agent.get("memory_content_notice"):
            print(f"         ! {agent['memory_content_notice']}")
        if agent.get("approvals_waiting"):
            print(
                f"         ! {_calls(agent['approvals_waiting'])} for your approval: "
                f"`agentctl approvals --agent {agent['name']}`"
            )
        recall = agent.get("recall")
        if recall:
            size = recall["bytes_on_disk"]
            on_disk = f", {size / 1e6:,.1f} MB on disk" if size is not None else ""
            print(f"         recall index {recall['state']}{on_disk}")


def _window_source(budget: dict[str, Any]) -> str:
    source = budget.get("window_source")
    if source == "setting":
        return f"setting: {budget['window_setting']}"
    if source == "default":
        return "default: the model's window is unknown; set AGENTD_CONTEXT_WINDOW"
    return source or "unknown"


def print_context(budget: dict[str, Any]) -> None:
    room = budget["threshold"] - budget["request_tokens"]
    position = f"{room:,} under the threshold" if room >= 0 else f"{-room:,} over the threshold"
    counted = "provider-reported usage + estimates" if budget["anchored"] else "estimated"
    print(f"model       {budget['model']}")
    print(f"window      {budget['window']:>9,} tokens ({_window_source(budget)})")
    print(f"threshold   {budget['threshold']:>9,} tokens (compaction starts above this)")
    print(
        f"floor       {budget['floor']:>9,} tokens (system {budget['system_tokens']:,} + "
        f"tools {budget['tools_tokens']:,})"
    )
    print(f"messages    {budget['messages']:>9,} in the window")
    print(f"request     ~{budget['request_tokens']:,} tokens ({counted}; {position})")
    ratio = budget.get("token_ratio", 1.0)
    if ratio != 1.0:
        print(f"estimates   ×{ratio:.2f} (this model counts more tokens than 4 characters each)")
    last = budget.get("last_compaction")
    if last:
        print(
            f"last compaction: {last['trigger']} at {shown(last['at'])}, "
            f"{last['messages_before']} → {last['messages_after']} messages, "
            f"~{last['tokens_before']} → ~{last['tokens_after']} tokens"
        )


def _model(agent: dict[str, Any]) -> str:
    """The model an agent uses, and whether it is its own or the global default."""
    if agent["model_is_default"]:
        return f"{agent['effective_model']} (the default, AGENTD_MODEL)"
    return agent["effective_model"]


def print_agents(agents: list[dict[str, Any]]) -> None:
    for agent in agents:
        print(f"{agent['id']}\t{agent['name']}\t{_model(agent)}")


def print_agent(agent: dict[str, Any]) -> None:
    window = agent["context_window"]
    gated = ", ".join(agent["requires_approval"])
    print(f"agent          {agent['name']} ({agent['id']})")
    print(f"model          {_model(agent)}")
    print(f"context window {f'{window:,} tokens' if window else 'as known for the model'}")
    print(f"approve        {gated + ' (each call waits for your yes)' if gated else 'none'}")
    print(f"conversation   {agent['default_conversation_id'] or '-'} (the default)")
    print(f"memory         {agent['memory_dir']}")
    print(f"created        {shown(agent['created_at'])}")


def print_conversations(conversations: list[dict[str, Any]]) -> None:
    for conversation in conversations:
        marker = "*" if conversation["default"] else " "
        print(f"{marker} {conversation['id']}\t{shown(conversation['created_at'])}")


def print_messages(messages: list[dict[str, Any]], around: str | None) -> None:
    """One line per message: local time, short id, role or kind, text; the message
    ``around`` (if any) is marked."""
    for message in messages:
        label = message["role"] if message.get("kind", "message") == "message" else message["kind"]
        text = message.get("content", "")
        calls = message.get("tool_calls") or []
        if calls:
            text = (text + " " if text else "") + " ".join(
                f"⚙ {c['name']}({c.get('arguments', '{}')})" for c in calls
            )
        marker = "◀ " if around and message_refs.names_message(around, message["id"]) else ""
        print(
            f"{shown(message['created_at'])}  {message_refs.short_id(message['id'])}  "
            f"{label:<9} {marker}{one_line(text)}"
        )


def print_hits(hits: list[dict[str, Any]]) -> None:
    """One line per hit, best first: score, local time, short id (what ``messages
    --around`` takes), role, text; ``no matches`` on stderr, so stdout stays a listing."""
    if not hits:
        print("no matches", file=sys.stderr)
    for hit in hits:
        print(
            f"{hit['score']:.2f}\t{shown(hit['created_at'])}\t"
            f"{message_refs.short_id(hit['message_id'])}\t{hit['role']}\t{one_line(hit['text'])}"
        )


def print_incomplete(why: str) -> None:
    """Why a search's hits may miss messages (the index is catching up after a restart),
    on stderr before them: a partial answer must not pass for a whole one."""
    print(f"({why})", file=sys.stderr)


def print_reflections(reflections: list[dict[str, Any]]) -> None:
    """One line per outcome; none yet (a new or an imported agent) is said on stderr, as
    ``approvals`` says nothing waits, so stdout stays a list for scripts."""
    if not reflections:
        print("no reflections yet", file=sys.stderr)
    for r in reflections:
        commits = ",".join(r["commits"]) or "-"
        print(
            f"{shown(r['finished_at'])}\t{r['reflection_id']}\t{r['trigger']}\t{r['status']}\t"
            f"{r.get('reason') or '-'}\t{commits}\t{r['duration_s']:.1f}s\t{r['message']}"
        )


def print_memory_log(commits: list[dict[str, Any]]) -> None:
    for commit in commits:
        print(
            f"{commit['short_sha']}  {shown(commit['date'])}  "
            f"{commit['author']}: {commit['subject']}"
        )


def print_memory_files(files: dict[str, str]) -> None:
    for path, text in files.items():
        print(f"── {path}\n{text.rstrip()}\n")


def commit_label(commit: dict[str, Any]) -> str:
    """A memory commit as history listings show it: short sha, local time, who made it
    (turn, reflection, user, merge, initial) and the short id of its job or message."""
    provenance = commit["provenance"]
    if provenance.get("reverts"):
        source = f"reverts {provenance['reverts'][:7]}"
    elif provenance.get("job_id"):
        source = f"job {message_refs.short_id(provenance['job_id'])}"
    elif provenance.get("message_id"):
        source = f"msg {message_refs.short_id(provenance['message_id'])}"
    elif provenance.get("via"):
        source = f"via {provenance['via']}"
    else:
        source = "-"
    return (
        f"{commit['short_sha']}  {shown(commit['authored_at'])}  "
        f"{provenance['kind']:<10}  {source:<15}"
    )


def print_blame(lines: list[dict[str, Any]]) -> None:
    for line in lines:
        print(f"{commit_label(line['commit'])}  {line['line_no']:>4}  {line['text']}")


def print_why(matches: list[dict[str, Any]], more: int) -> None:
    """Each matching memory line, its commit, and the messages it came from (with the
    short ids ``messages --around`` takes); ``no memory line matches`` on stderr."""
    if not matches:
        print("no memory line matches", file=sys.stderr)
    for match in matches:
        commit = match["commit"]
        print(f"{match['path']}:{match['line_no']}: {match['text']}")
        print(f"  {commit_label(commit)}  {commit['subject']}")
        provenance = commit["provenance"]
        if provenance["kind"] == "reflection" and provenance.get("reflected_first"):
            span = f"{provenance['reflected_first']}..{provenance['reflected_last']}"
            if match["evidence"]:
                print(f"  reflected on messages {span}; the user's words there closest to it:")
            else:
                print(f"  reflected on messages {span}; no user message there matches it")
        elif provenance["kind"] == "turn" and match["evidence"]:
            print("  the user's message in the turn that wrote it:")
        elif provenance.get("via"):
            print(f"  {_remembered(provenance)}")
        for said in match["evidence"]:
            print(
                f"    {shown(said['created_at'])}  {message_refs.short_id(said['message_id'])}  "
                f"{one_line(said['text'])}"
            )
    if more:
        print(f"(and {more} more matching lines: narrow the text)", file=sys.stderr)


def _remembered(provenance: dict[str, Any]) -> str:
    """Who remembered a line, and through which door (``agentctl remember``, the web view,
    an MCP host's ``remember`` tool)."""
    if provenance["via"] == "mcp":
        host = provenance.get("client") or "a host that gave no name"
        return f"remembered over MCP by {host} (agentctl mcp's remember tool)"
    door = "in the web view" if provenance["via"] == "web" else "with agentctl remember"
    return f"remembered by the user {door}"


def print_memory_diff(diff: dict[str, Any]) -> None:
    if not diff["commits"] and not diff["diff"]:
        print(f"no memory changes since {diff['from'][:7]}")
        return
    print(f"memory changes {diff['from'][:7]}..{diff['to'][:7]}:")
    for commit in diff["commits"]:
        print(f"  {commit_label(commit)}  {commit['subject']}")
    print()
    print(diff["diff"], end="")
    if diff["truncated"]:
        print("(the diff is cut here; see the rest with `git diff` in `agentctl memory path`)")


def print_proposals(answer: dict[str, Any]) -> None:
    """Each held proposal: why it is held, how to answer it, its diffstat and patch."""
    flag = f" --agent {answer['agent']}"
    if not answer["proposals"]:
        print("no reflection is held for you", file=sys.stderr)
    for proposal in answer["proposals"]:
        print(f"proposal {proposal['id']}  held {shown(proposal['created_at'])}")
        print(f"  held because {proposal['why']}")
        print(
            f"  accept: agentctl memory accept {proposal['id']}{flag}   "
            f"reject: agentctl memory reject {proposal['id']}{flag}"
        )
        print(f"  {proposal['diffstat']}")
        print()
        print(proposal["diff"], end="")
        if proposal["truncated"]:
            print("(the diff is cut here)")
        print()


def print_answered(answer: dict[str, Any]) -> None:
    proposal = answer["proposal"]
    if proposal["state"] == "rejected":
        print(f"rejected proposal {proposal['id']}: memory is unchanged")
    elif proposal["merge_commit"]:
        print(
            f"accepted proposal {proposal['id']}: merged in {proposal['merge_commit'][:7]}; "
            "every conversation's next turn is told"
        )
    else:
        print(f"accepted proposal {proposal['id']}: its changes were in memory already")


def print_reverted(done: dict[str, Any]) -> None:
    reverted = done["reverted"]
    if done["commit"] is None:
        print(f"nothing to revert: the changes of {reverted['short_sha']} are already undone")
        return
    print(
        f"reverted {reverted['short_sha']} ({reverted['subject']}) in "
        f"{done['commit']['short_sha']}; every conversation's next turn is told"
    )


def _calls(count: int) -> str:
    return f"{count} tool call{'' if count == 1 else 's'} waiting"


def print_waiting(waiting: list[dict[str, Any]]) -> None:
    """How to answer each waiting call (stderr: stdout stays the turn's)."""
    for call in waiting:
        short = message_refs.short_id(call["id"])
        print(
            f"  ■ {call['name']} waits for your approval: agentctl approve {short}   "
            f"(or: agentctl deny {short} --reason TEXT)",
            file=sys.stderr,
            flush=True,
        )


def _worker(worker: dict[str, Any]) -> str:
    """``name@host``, and a word when the worker runs an agentd too old for the jobs."""
    name = str(worker["name"])
    if "@" not in name and worker.get("host"):
        name = f"{name}@{worker['host']}"
    return name if worker.get("current", True) else f"{name} (older agentd: takes no jobs)"
