"""What must be true after every run of the chaos bench, read from disk, git and Redis,
never from the daemon's own account of itself.

- The run's fact is in memory exactly once: ``git grep`` over every file at the memory
  repo's HEAD (a fact that landed in another file still counts; twice anywhere is a
  duplicate).
- Every line of every ``messages.jsonl`` ends with a newline and parses as a message, no
  message id appears twice, and each user message of the run appears exactly once if
  the daemon acknowledged it or it was seen on disk before the kill (at most once
  otherwise).
- Nothing is left over: no ``reflection/*`` branch, no worktree besides the checkout, an
  empty ``reflections/worktrees/`` and outbox, a clean checkout with no merge in progress
  and no ``index.lock``.

:func:`diagnosis` gathers what a failed run needs to be debugged: the outbox, the
outcomes recorded during the run, what Redis holds for the agent, and the warnings and
errors the daemon and workers logged.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import redis
from pydantic import ValidationError

from shared.coordination import redis_keys
from shared.models.messages import Message
from tests.faults.stack import HarnessError, Home

Kind = Literal["lost", "duplicated", "stalled", "left_over", "error"]
KINDS: tuple[Kind, ...] = ("lost", "duplicated", "stalled", "left_over", "error")


@dataclass(frozen=True)
class Problem:
    kind: Kind
    detail: str


@dataclass(frozen=True)
class Said:
    """A user message the run sent."""

    text: str
    must_be_kept: bool
    """The daemon acknowledged it, or it was on disk before the kill: it must be in the log
    exactly once. Otherwise it may be missing, but never twice."""


def git(memory_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(memory_dir), *args],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except subprocess.TimeoutExpired:
        raise HarnessError(f"git {' '.join(args)} did not return within 15 s") from None


# --- memory ---------------------------------------------------------------------------------


def fact_count(home: Home, token: str) -> int:
    """How many times ``token`` occurs in the files at the memory repo's HEAD."""
    found = git(home.memory_dir(), "grep", "-o", "-F", "-e", token, "HEAD")
    if found.returncode == 1:
        return 0
    if found.returncode != 0:
        raise HarnessError(f"git grep in memory failed: {found.stderr.strip()}")
    return len(found.stdout.splitlines())


def leftovers(home: Home) -> list[str]:
    """Everything a finished reflection should not have left behind."""
    memory = home.memory_dir()
    found = []
    branches = [
        line.strip(" *+")
        for line in git(memory, "branch", "--list", "reflection/*").stdout.splitlines()
    ]
    if branches:
        found.append(f"branches {branches}")
    listed = git(memory, "worktree", "list", "--porcelain").stdout.splitlines()
    others = [
        line.removeprefix("worktree ")
        for line in listed
        if line.startswith("worktree ") and Path(line.removeprefix("worktree ")) != memory
    ]
    if others:
        found.append(f"git worktrees {others}")
    if home.worktrees():
        found.append(f"reflections/worktrees/ holds {home.worktrees()}")
    if home.outbox():
        found.append(f"outbox holds {[p.name for p in home.outbox()]}")
    dirty = git(memory, "status", "--porcelain").stdout.strip()
    if dirty:
        found.append(f"memory checkout dirty: {dirty.splitlines()[:5]}")
    for name in ("MERGE_HEAD", "index.lock"):
        if (memory / ".git" / name).exists():
            found.append(f"memory/.git/{name} exists")
    return found


# --- messages -------------------------------------------------------------------------------


def message_problems(home: Home, said: list[Said]) -> list[Problem]:
    problems: list[Problem] = []
    ids: Counter[str] = Counter()
    user_texts: Counter[str] = Counter()
    for path in home.message_logs():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            fragment = data.rsplit(b"\n", 1)[-1][:120].decode(errors="replace")
            problems.append(Problem("lost", f"{path} ends in a torn line: {fragment}"))
        for number, line in enumerate(data.split(b"\n")[:-1], start=1):
            try:
                message = Message.parse_line(line)
            except ValidationError as exc:
                problems.append(
                    Problem("lost", f"{path}:{number} does not parse ({exc.error_count()} errors)")
                )
                continue
            ids[message.id] += 1
            if message.role == "user" and message.kind == "message":
                user_texts[message.content] += 1
    for message_id, count in ids.items():
        if count > 1:
            problems.append(Problem("duplicated", f"message {message_id} is logged {count} times"))
    for message in said:
        count = user_texts[message.text]
        if count == 0 and message.must_be_kept:
            problems.append(Problem("lost", f"user message {message.text!r} is not in the log"))
        elif count > 1:
            problems.append(
                Problem("duplicated", f"user message {message.text!r} is logged {count} times")
            )
    return problems


def persisted(home: Home, text: str) -> bool:
    """Whether a user message with exactly ``text`` is on disk."""
    needle = json.dumps(text, ensure_ascii=False).encode()
    try:
        return any(needle in path.read_bytes() for path in home.message_logs())
    except (OSError, HarnessError):
        return False


# --- diagnosis ------------------------------------------------------------------------------


def diagnosis(home: Home, since: datetime) -> list[str]:
    """Short lines saying what state the run left and what happened during it: for the
    failure list, not for judging."""
    lines = snapshot(home)
    try:
        lines += _outcome_lines(home, since)
    except HarnessError as exc:
        lines.append(f"(no agent state: {exc})")
    lines += _supervisor_lines(home)
    lines += _log_lines(home, since)
    return lines


def snapshot(home: Home) -> list[str]:
    """The agent's reflection state right now: outbox, worktrees, what Redis holds."""
    lines = []
    try:
        lines += _outbox_lines(home)
        if home.worktrees():
            lines.append(f"worktrees {home.worktrees()}")
    except HarnessError as exc:
        lines.append(f"(no agent state: {exc})")
    return lines + _redis_lines(home)


def _supervisor_lines(home: Home, limit: int = 6) -> list[str]:
    """What ``agentd up`` said about its children (restarts, giving up) in this home."""
    path = home.output("up")
    if not path.exists():
        return []
    said = [
        line.strip()
        for line in path.read_text(errors="replace").splitlines()
        if "exited with status" in line or "giving up" in line
    ]
    return [f"agentd up: {line}" for line in said[-limit:]]


def _outbox_lines(home: Home) -> list[str]:
    lines = []
    for path in home.outbox():
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            lines.append(f"outbox {path.name}: unreadable ({exc})")
            continue
        sent_at = entry.get("sent_at")
        sent = f"sent {time.time() - sent_at:.0f} s ago" if sent_at else "never sent"
        request = entry.get("request", {})
        lines.append(
            f"outbox {path.name}: trigger {request.get('trigger')}, {sent}, "
            f"attempts {entry.get('attempts')}"
        )
    return lines


def _outcome_lines(home: Home, since: datetime) -> list[str]:
    path = home.reflections_dir() / "log.jsonl"
    if not path.exists():
        return ["no reflection outcome recorded yet"]
    lines = []
    for raw in path.read_text(errors="replace").splitlines():
        try:
            outcome = json.loads(raw)
            finished = datetime.fromisoformat(outcome["finished_at"])
        except (ValueError, KeyError, TypeError):
            lines.append(f"log.jsonl: unreadable line {raw[:120]!r}")
            continue
        if finished >= since:
            lines.append(
                f"outcome {outcome.get('reflection_id')} ({outcome.get('request_id')}): "
                f"{outcome.get('status')} {outcome.get('reason') or ''} "
                f"{outcome.get('message', '')[:160]!r}"
            )
    return lines or ["no reflection outcome recorded during the run"]


def _redis_lines(home: Home) -> list[str]:
    client = redis.Redis(unix_socket_path=str(home.valkey_socket), socket_timeout=1.0)
    try:
        agent_id = home.agent_id()
        shown = []
        for key in client.scan_iter(match="agentd:*", count=1000):
            name = key.decode()
            if name.startswith(("agentd:job:", "agentd:worker:")):
                continue
            if agent_id in name or "lease" in name or "follow" in name:
                value = client.get(key) if client.type(key) == b"string" else b"(not a string)"
                shown.append(
                    f"{name} = {(value or b'').decode(errors='replace')[:80]} "
                    f"(ttl {client.ttl(key)} s)"
                )
        queue = client.llen(redis_keys.REFLECTION_QUEUE)
        unacked = client.hlen("unacked")
        return [f"redis: queue {queue}, unacked {unacked}", *(f"redis: {s}" for s in shown)]
    except (redis.RedisError, HarnessError) as exc:
        return [f"redis: not reachable ({exc})"]
    finally:
        client.close()


def _log_lines(home: Home, since: datetime, limit: int = 12) -> list[str]:
    """Warnings and errors the daemon and workers logged during the run, each distinct
    one once (with how often it came) and cut to its first line."""
    seen: dict[str, int] = {}
    for path in sorted(home.layout.logs_dir.glob("*.log")):  # one file per process
        name = path.name
        for raw in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(raw)
                stamp = datetime.fromisoformat(record["timestamp"])
            except (ValueError, KeyError, TypeError):
                continue
            if stamp < since or record.get("level") not in ("warning", "error", "critical"):
                continue
            fields = {
                k: v
                for k, v in record.items()
                if k not in _COMMON_FIELDS and k not in ("pid", "exception")
            }
            event = str(record.get("event", "")).splitlines()[0][:160]
            line = f"{name.removesuffix('.log')} {record['level']}: {event}"
            if fields:
                line += f" {json.dumps(fields, ensure_ascii=False)[:200]}"
            seen[line] = seen.get(line, 0) + 1
    found = [line if count == 1 else f"{line} (×{count})" for line, count in seen.items()]
    if len(found) > limit:
        found = [*found[: limit // 2], f"… {len(found) - limit} more …", *found[-limit // 2 :]]
    return found


_COMMON_FIELDS = ("timestamp", "level", "service", "logger", "event", "agent_id", "job_id")
