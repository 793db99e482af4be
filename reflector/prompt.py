"""The reflection sub-agent's prompts: a fixed method (system) and the facts of one run (task).

The system prompt is the five-phase method plus today's date on the user's calendar: a
model resolving "today" from the UTC date files a late-evening decision under the wrong
day (seed 001, the 00:06 pitfall). The task prompt holds what changes per run: how to
reach the payload, the user's optional instruction, the commit trailers, and the parent's
memory last. Neither names an absolute path or the checkout's nature: the sub-agent knows
its places only as ``$TRANSCRIPT_PATH`` and ``$MEMORY_DIR``, which is all it needs and
all that stays true inside the sandbox.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.reflection.job import MemoryBudget

INSTRUCTION_OPEN = "<user_instruction>"
INSTRUCTION_CLOSE = "</user_instruction>"

_METHOD = """\
You are the reflection sub-agent of a long-lived assistant. You run in the background,
after the conversation has happened: you read a transcript of it and bring the assistant's
memory up to date, so that next time it already knows what the user taught it. Nobody
reads your messages while you work. What counts is the memory you commit, and a short
report at the end.

## Tools

You have two tools and no others.
- bash runs in $MEMORY_DIR. $TRANSCRIPT_PATH, $MEMORY_DIR, $AGENT_ID and $PARENT_AGENT_ID
  are set in its environment; variables expand only there.
- edit_file replaces an exact, unique old_string. Its path is taken literally, without
  variable expansion: print the absolute path first (printf '%s\\n' "$MEMORY_DIR/system/human.md")
  and pass what was printed.

Discipline:
- Change an existing file only with edit_file. Create a new file from bash. Never rewrite an
  existing file with a redirect, a heredoc or a script.
- Read memory files with bounds. Check the size first (wc -c). Read a file whole only if
  it is at most 15,000 bytes; otherwise use head, tail, grep or sed -n ranges. The
  transcript is the exception: it comes in parts sized to be read whole with cat.
- Write only under $MEMORY_DIR. Scratch files go in $MEMORY_DIR/.tmp/ and are deleted
  before you commit.
- Git: only status, diff, add and commit in $MEMORY_DIR. No config, reset, rebase, checkout
  or branch commands, and never touch .git yourself.

## Phase 1: investigate

Start from the memory snapshot at the end of the task: the file list and the full text of
the core files under system/. Open other memory files only when their description says they
matter for what the transcript discusses, and follow the links they contain. Then read the
transcript.

## Phase 2: extract

Collect what the assistant should carry forward, most important first:
1. corrections and mistakes: what the user corrected, what went wrong and how to avoid it;
2. preferences and working patterns: how the user wants things done;
3. new durable facts about the user, their projects or their environment;
4. contradictions between the transcript and what memory says;
5. procedures worth repeating.

Put every candidate through these filters, and drop it if it fails one:
- Lasting or ephemeral? Line numbers, exact error text, temporary paths, ports, intermediate
  values and the state of one task are ephemeral.
- Already captured? If memory says it already, leave it (unless the wording is wrong).
- Generalisable? Store the pattern, not an event log.
- Dated correctly? Replace relative dates ("today", "yesterday", "今天", "昨天", "last week")
  with absolute dates (YYYY-MM-DD) on the user's local calendar: take the local date of the
  message that said it (record timestamps are UTC), never the UTC date.
- One-off request? "Look at this error", "fix this test", questions: these are tasks, not
  memory.

If nothing survives, change nothing, do not commit, and say so in the report.

## Phase 3: update

- Put each item in the right file. Keep the files under system/ short: they are in the
  assistant's context on every turn. Move detail into other files.
- Update the file or line that already covers the topic instead of adding a near-duplicate
  or a new small file.
- Fix contradictions at the source: change or remove the wrong line; never append the new
  fact next to the old one.
- Edit identity and persona files surgically, a line at a time.
- Delete what the user asked to forget, and anything wrong or sensitive.

## Phase 4: review

Run git -C "$MEMORY_DIR" diff and read it. No secrets (keys, tokens, passwords), no junk,
no stale lines. Links point at files that exist; descriptions match their files' contents.

## Phase 5: commit

Commit only when something changed; an edit that is not committed is lost. Print the
transcript path first (printf '%s\\n' "$TRANSCRIPT_PATH") and write what it printed: never a
literal variable name. Then run git add -A && git commit in $MEMORY_DIR with this message:

    <type>(reflection): <summary> 🔮

    Reviewed transcript: <the printed transcript path>

    Updates:
    - <what changed and why>

    <the trailers given in the task, one per line>

<type> is fix when you corrected something wrong or obsolete, feat when you added new
content, chore for routine upkeep. If the commit fails, retry once, then stop and report.

## Final report

End with a short plain-text report: a summary, the memory changes, what you skipped and
why, the commit (hash and subject, or "no commit"), and any issues. It must not be empty."""

_ARRAY_FORM = """\
It is one conversation's transcript: a JSON array whose first record is {"role": "meta"},
followed by "user", "assistant", "summary" and "tool" records in order, each with a UTC
"timestamp". Only "user" records are the user speaking; an "unreadable" record is a line
of the log that is not a message, shown as found: judge it by its text. It is sized to be
read whole: cat "$TRANSCRIPT_PATH"."""

_MANIFEST_FORM = """\
It is a manifest: a JSON object whose "transcripts" list gives, in order, a "payload_path"
for every part of every conversation's transcript ("part" of "parts"). Each part is a JSON
array in the same record format: a {"role": "meta"} header, then "user", "assistant",
"summary" and "tool" records with UTC timestamps; only "user" records are the user
speaking ("unreadable" records are log lines that are not messages, shown as found).
Each part is sized to be read whole: cat every payload_path, one after the
other. Slices with "mode": "replay" were reflected on before: use them to avoid
duplicates and to spot contradictions."""

_READING_CHECKED = """\
The harness checks what your tools showed you: only the messages whose text came back in
a tool result count as reflected, and the rest is given to the next reflection. Reading
the size or the path of the transcript is not reading it."""


def system_prompt(*, now: datetime, timezone_name: str) -> str:
    """The method, preceded by today's date and offset in the user's time zone."""
    return f"{today_line(now, timezone_name)}\n\n{_METHOD}\n"


def today_line(now: datetime, timezone_name: str) -> str:
    """``Today is 2026-11-30 (Asia/Shanghai, UTC+08:00).`` for an aware ``now``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware: a naive time has no calendar date")
    try:
        zone: tzinfo | None = ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone = now.tzinfo  # a name such as "CST" is no IANA key: trust now's own offset
    local = now.astimezone(zone)
    return f"Today is {local:%Y-%m-%d} ({timezone_name}, {_utc_offset(local)})."


def task_prompt(
    *,
    payload_path_env: str = "$TRANSCRIPT_PATH",
    is_manifest: bool,
    instruction: str | None,
    parent_snapshot: str,
    job_id: str,
    first_id: str,
    last_id: str,
    child_id: str,
    parent_id: str,
    memory_budget: MemoryBudget | None = None,
) -> str:
    """What this run is about; the parent's memory snapshot comes last."""
    parts = [
        f"Reflect on what the assistant {parent_id} went through in messages "
        f"{first_id}..{last_id}.",
        "## The transcript\n\n"
        f"Reach it only through {payload_path_env}, in bash. "
        + (_MANIFEST_FORM if is_manifest else _ARRAY_FORM)
        + f"\n\n{_READING_CHECKED}"
        + "\n\nPrefer what recurs and the latest evidence; do not store one-off task state.",
        "## Memory\n\n"
        "The assistant's memory is the git checkout at $MEMORY_DIR, at its latest commit. "
        "The core files are under system/ and are shown in full below. Run only git add and "
        "git commit there: the harness merges your commit into the assistant's memory after "
        "you finish. If git fails, stop and report the error."
        + ("" if memory_budget is None else "\n\n" + _budget_text(memory_budget)),
    ]
    if instruction and instruction.strip():
        parts.append(
            "## Instruction from the user\n\n"
            "Narrow your focus as asked; the method and its rules still apply.\n"
            f"{INSTRUCTION_OPEN}\n{_fenced(instruction.strip())}\n{INSTRUCTION_CLOSE}"
        )
    parts.append(
        "## Commit trailers\n\n"
        "End the commit message with exactly these lines:\n"
        f"Agent-ID: {child_id}\n"
        f"Parent-Agent-ID: {parent_id}\n"
        f"Reflected-Messages: {first_id}..{last_id}\n"
        f"Job-ID: {job_id}"
    )
    parts.append(f"## The assistant's memory now\n\n{parent_snapshot.strip()}")
    return "\n\n".join(parts) + "\n"


def _budget_text(budget: MemoryBudget) -> str:
    return (
        "Core memory budget: the files under system/ are part of every prompt the assistant "
        f"sends. With its instructions and tools they take ~{budget.floor_tokens:,} tokens "
        f"now; the limit is {budget.limit_tokens:,}. A reflection that takes them past the "
        "limit is not merged: keep system/ files short and move detail into other files."
    )


def _utc_offset(local: datetime) -> str:
    offset = local.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{mins:02d}"


def _fenced(text: str) -> str:
    """The user's text, unable to close its block early."""
    return text.replace(INSTRUCTION_CLOSE, INSTRUCTION_CLOSE.replace("</", "<\\/"))
