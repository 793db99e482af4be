"""The deterministic reflection model: the five phases as rules, played through the real loop.

Used for reflection when the model is ``mock``. It behaves like a model: every reply is
decided from the request alone (system prompt, task prompt, the tool calls made so far
and their results), and everything it knows about the payload and memory it learned
through its tools. So it runs unchanged inside :func:`shared.agent.loop.run_turn`, in
the sandbox, and a test of it is a test of the whole sub-agent path.

The steps, each one reply:
1. ``wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"``;
2. for a manifest, ``cat`` every slice it lists; and print + ``cat`` ``system/human.md``;
3. extract: from user records keep durable statements (preference and decision markers
   such as 我更喜欢 / 以后 / 一律 / always / from now on), skip questions, one-off requests,
   anything that looks secret and lines memory already has; rewrite 今天 / 昨天 / today /
   yesterday as the record's date on the user's local calendar (``2026-11-30 …``). A
   correction (别再叫我小陆了，叫我陆工) edits the line it corrects instead of appending.
   Changes go through ``edit_file``; nothing left → a report and no commit;
4. commit with the reflection format and the trailers the task prompt lists;
5. a short report.

The user's time zone comes from the system prompt's "Today is … (<zone>, UTC±hh:mm)."
line unless the constructor is given one: the date of "today" is the user's, not UTC's.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.ids import new_id
from shared.memory import frontmatter
from shared.models.messages import Message, ToolCall
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import DEFAULT_MOCK_CONTEXT_WINDOW, MOCK_MODEL, admit, respond

HUMAN_FILE = "system/human.md"
READ_PAYLOAD = 'wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"'
READ_HUMAN = f'printf \'%s\\n\' "$MEMORY_DIR/{HUMAN_FILE}" && cat "$MEMORY_DIR/{HUMAN_FILE}"'
CREATE_HUMAN = f'mkdir -p "$MEMORY_DIR/system" && cat > "$MEMORY_DIR/{HUMAN_FILE}"'
COMMIT = 'git -C "$MEMORY_DIR" add -A && git -C "$MEMORY_DIR" commit -q -F -'
SHOW_COMMIT = "git -C \"$MEMORY_DIR\" log -1 --format='%h %s'"
TRAILERS = ("Agent-ID", "Parent-Agent-ID", "Reflected-Messages", "Job-ID")
_HEREDOC = "REFLECTION_EOF"
_EXIT_CODE = re.compile(r"\n?\[exit code \d+\]$")

_TODAY_LINE = re.compile(
    r"Today is (?P<date>\d{4}-\d{2}-\d{2}) \((?P<zone>[^,()]+), "
    r"UTC(?P<sign>[+-])(?P<hours>\d{2}):(?P<minutes>\d{2})\)"
)
_TRAILER_LINE = re.compile(rf"^(?P<key>{'|'.join(TRAILERS)}): (?P<value>\S.*)$", re.MULTILINE)

_STRONG = re.compile(
    r"我更喜欢|以后|别再|一律|总是|不再|记住|"
    r"\b(?:prefer|always|never|from now on|remember)\b",
    re.IGNORECASE,
)
"""Markers of something meant to last."""
_WEAK = re.compile(r"不要|\b(?:don't|do not)\b", re.IGNORECASE)
"""Markers that last only when the line is not itself a request ("帮我改下，不要动别的")."""
_REQUEST = re.compile(
    r"^(?:帮我|请帮|麻烦|看下|看一下|\b(?:can|could|would) you\b|please (?:fix|look|check|help))",
    re.IGNORECASE,
)
_QUESTION = re.compile(r"(?:[?？]|吗[。.]?)\s*$")
_SECRET = re.compile(
    r"sk-[A-Za-z0-9_-]{12,}|密码|\b(?:password|passwd|api[_ -]?key|secret|token)\b", re.IGNORECASE
)
_RELATIVE_DAYS = (
    (re.compile(r"今天|今日"), 0),
    (re.compile(r"昨天|昨日"), -1),
    (re.compile(r"\btoday\b", re.IGNORECASE), 0),
    (re.compile(r"\byesterday\b", re.IGNORECASE), -1),
)
_AFTER_REMOVED_WORD = re.compile(r"^[\s，,]+")
_DATE_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2}\s*")
_RENAME = (
    re.compile(
        r"别再(?:叫|称呼)我(?P<old>[^\s，,。.!！了]+)了?[\s，,、]*(?:请)?(?:叫|称呼)我(?P<new>[^\s，,。.!！]+)"
    ),
    re.compile(
        r"\b(?:don't|do not|stop) call(?:ing)? me (?P<old>[\w-]+)(?: any ?more)?[,;.]?\s*"
        r"(?:please )?call me (?P<new>[\w-]+)",
        re.IGNORECASE,
    ),
)


class MockReflector(Provider):
    """A provider whose replies are the reflection method, applied by rules."""

    def __init__(
        self,
        *,
        timezone_name: str | None = None,
        context_window: int = DEFAULT_MOCK_CONTEXT_WINDOW,
    ) -> None:
        self.model = MOCK_MODEL
        self.context_window = context_window
        self.timezone_name = timezone_name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        prompt_tokens = admit(request, self.context_window, "mock reflector")
        return respond(prompt_tokens, _next_action(request, self.timezone_name))


# --- what the run has seen so far ---------------------------------------------------------


@dataclass
class _Seen:
    """The tool results in the request, sorted by which of the mock's steps produced them."""

    payload: str | None = None
    slices: dict[str, str] = field(default_factory=dict)
    human: str | None = None
    edit_results: list[tuple[str, bool]] = field(default_factory=list)
    """(output, failed) of every change made."""
    commit: str | None = None


def _seen(messages: list[Message]) -> _Seen:
    calls = {call.id: call for m in messages if m.role == "assistant" for call in m.tool_calls}
    seen = _Seen()
    for message in messages:
        call = calls.get(message.tool_call_id or "") if message.role == "tool" else None
        if call is None:
            continue
        output = message.content
        command = _command(call)
        if call.name == "edit_file" or command.startswith(CREATE_HUMAN):
            failed = message.is_error or _EXIT_CODE.search(output) is not None
            seen.edit_results.append((output, failed))
        elif command == READ_PAYLOAD:
            seen.payload = output
        elif command == READ_HUMAN:
            seen.human = output
        elif command.startswith(COMMIT):
            seen.commit = output
        elif command.startswith("cat "):
            seen.slices[shlex.split(command)[1]] = output
    return seen


def _command(call: ToolCall) -> str:
    if call.name != "bash":
        return ""
    try:
        command = call.parsed_arguments().get("command")
    except ValueError:
        return ""
    return command if isinstance(command, str) else ""


# --- deciding the next reply --------------------------------------------------------------


def _next_action(request: ModelRequest, timezone_name: str | None) -> list[ToolCall] | str:
    seen = _seen(request.messages)
    if seen.payload is None:
        return [_bash(READ_PAYLOAD)]
    try:
        payload_path, records, slice_paths = _read_payload(seen.payload)
    except ValueError as exc:
        return f"Summary: I could not read the transcript ({exc}).\nCommit: none.\nIssues: {exc}"
    reads = [_bash(f"cat {shlex.quote(path)}") for path in slice_paths if path not in seen.slices]
    if seen.human is None:
        reads.append(_bash(READ_HUMAN))
    if reads:
        return reads
    for path in slice_paths:
        try:
            records += _records(_json(seen.slices[path]))
        except ValueError as exc:
            return f"Summary: I could not read the slice {path} ({exc}).\nCommit: none."
    human_path, human = _human_file(seen.human)
    zone = _zone(timezone_name, request.system)
    plan = _plan(records, human, zone, _today(request.system, zone))
    if not plan.changed:
        return plan.report(commit="none: nothing worth keeping, so nothing was changed")
    if not seen.edit_results:
        return plan.changes(human_path, human)
    failures = [output for output, failed in seen.edit_results if failed]
    if failures:
        return plan.report(commit="none: an edit failed", issues=failures)
    if seen.commit is None:
        return [_bash(plan.commit_command(payload_path, _trailers(request.messages)))]
    if _EXIT_CODE.search(seen.commit):
        return plan.report(commit="failed", issues=[seen.commit])
    return plan.report(commit=seen.commit.strip())


def _bash(command: str) -> ToolCall:
    return _call("bash", {"command": command})


def _call(name: str, args: dict[str, Any]) -> ToolCall:
    return ToolCall(id=new_id("call"), name=name, arguments=json.dumps(args, ensure_ascii=False))


# --- reading tool output ------------------------------------------------------------------


def _read_payload(output: str) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(payload path, its records, slice paths) from the ``wc -c && cat`` output."""
    first, _, rest = output.partition("\n")
    size_and_path = first.split(maxsplit=1)
    if len(size_and_path) != 2 or not size_and_path[0].isdigit():
        raise ValueError(f"unexpected output: {first[:200]}")
    data = _json(rest)
    if isinstance(data, dict):
        entries = data.get("transcripts") or []
        paths = [e["payload_path"] for e in entries if isinstance(e.get("payload_path"), str)]
        return size_and_path[1], [], paths
    return size_and_path[1], _records(data), []


def _json(output: str) -> Any:
    if _EXIT_CODE.search(output):
        raise ValueError(output[-300:])
    try:
        return json.loads(output)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}); it may be too large for a whole read") from None


def _records(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise ValueError("a transcript must be a JSON array of records")
    return [record for record in data if isinstance(record, dict)]


def _human_file(output: str) -> tuple[str, str | None]:
    """(absolute path, text) from ``printf path && cat path``; no text if it is missing."""
    path, _, text = output.partition("\n")
    return path, None if _EXIT_CODE.search(output) else text


def _trailers(messages: list[Message]) -> list[str]:
    task = next((m.content for m in messages if m.role == "user" and m.kind == "message"), "")
    found = {m["key"]: m["value"].strip() for m in _TRAILER_LINE.finditer(task)}
    return [f"{key}: {found[key]}" for key in TRAILERS if found.get(key)]


def _zone(timezone_name: str | None, system: str) -> tzinfo:
    """The constructor's zone, else the prompt's (by name, else by its stated offset)."""
    match = _TODAY_LINE.search(system)
    name = timezone_name or (match["zone"].strip() if match else "UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        if match is None:
            return UTC
        offset = timedelta(hours=int(match["hours"]), minutes=int(match["minutes"]))
        return timezone(-offset if match["sign"] == "-" else offset, name)


def _today(system: str, zone: tzinfo) -> date:
    match = _TODAY_LINE.search(system)
    return date.fromisoformat(match["date"]) if match else datetime.now(zone).date()


# --- extracting and planning --------------------------------------------------------------


@dataclass
class _Plan:
    """What to change in ``system/human.md``, and what was left out and why."""

    added: list[str] = field(default_factory=list)
    corrected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    user_messages: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.corrected)

    def changes(self, path: str, human: str | None) -> list[ToolCall]:
        """Edits for an existing file (corrections in place, then one append); a new file
        is created from bash."""
        new_lines = [f"- {line}" for line in self.added]
        if human is None:
            meta: frontmatter.Meta = {"name": "human", "description": "What I know about the user."}
            text = frontmatter.render(meta, "\n".join(new_lines) + "\n")
            return [_bash(f"{CREATE_HUMAN} <<'{_HEREDOC}'\n{text}{_HEREDOC}")]
        calls = []
        for old, new in self.corrected:
            calls.append(_edit(path, old, new, replace_all=True))
            human = human.replace(old, new)
        if new_lines:
            anchor = _unique_tail(human)
            new = "\n".join([anchor, *new_lines])
            calls.append(_edit(path, anchor, new, replace_all=False))
        return calls

    def commit_command(self, payload_path: str, trailers: list[str]) -> str:
        kind = "fix" if self.corrected else "feat"
        parts = []
        if self.corrected:
            parts.append(f"correct {len(self.corrected)} memory line(s)")
        if self.added:
            parts.append(f"remember {len(self.added)} user preference(s)")
        updates = [
            f"- {HUMAN_FILE}: {old!r} -> {new!r} (the user corrected it)"
            for old, new in self.corrected
        ]
        updates += [f"- {HUMAN_FILE}: added {line!r} (lasting)" for line in self.added]
        message = "\n".join(
            [
                f"{kind}(reflection): {' and '.join(parts)} 🔮",
                "",
                f"Reviewed transcript: {payload_path}",
                "",
                "Updates:",
                *updates,
                *(["", *trailers] if trailers else []),
            ]
        )
        return f"{COMMIT} <<'{_HEREDOC}' && {SHOW_COMMIT}\n{message}\n{_HEREDOC}"

    def report(self, *, commit: str, issues: list[str] | None = None) -> str:
        lines = [
            f"Summary: reviewed {self.user_messages} user message(s); "
            f"{len(self.added)} added, {len(self.corrected)} corrected, "
            f"{len(self.skipped)} skipped.",
            "Memory changes:",
            *[f"- {HUMAN_FILE}: {old} -> {new}" for old, new in self.corrected],
            *[f"- {HUMAN_FILE}: + {line}" for line in self.added],
        ]
        if not self.changed:
            lines.append("- none")
        lines.append("Skipped:")
        lines += [f"- {text!r}: {why}" for text, why in self.skipped] or ["- nothing"]
        lines.append(f"Commit: {commit}")
        lines.append("Issues: " + ("; ".join(i.strip() for i in issues) if issues else "none"))
        return "\n".join(lines)


def _edit(path: str, old: str, new: str, *, replace_all: bool) -> ToolCall:
    args: dict[str, Any] = {"path": path, "old_string": old, "new_string": new}
    if replace_all:
        args["replace_all"] = True
    return _call("edit_file", args)


def _plan(records: list[dict[str, Any]], human: str | None, zone: tzinfo, today: date) -> _Plan:
    plan = _Plan()
    memory_lines = _body_lines(human or "")
    for record in records:
        content = record.get("content")
        if record.get("role") != "user" or not isinstance(content, str):
            continue
        plan.user_messages += 1
        day = _local_date(record.get("timestamp"), zone) or today
        for line in (part.strip() for part in content.splitlines()):
            if line:
                _consider(plan, line, day, memory_lines)
    return plan


def _consider(plan: _Plan, line: str, day: date, memory_lines: list[str]) -> None:
    """Put one line of user speech into the plan: a correction, an addition, or skipped."""
    rename = next((m for pattern in _RENAME if (m := pattern.search(line))), None)
    if rename is not None:
        old, new = rename["old"], rename["new"]
        targets = [m for m in memory_lines if old in m]
        if targets:
            for target in targets:
                pair = (target, target.replace(old, new))
                if pair not in plan.corrected:
                    plan.corrected.append(pair)
            return
        if any(new in m for m in memory_lines):
            plan.skipped.append((line, "already in memory"))
            return
    reason = _skip_reason(line)
    if reason is not None:
        plan.skipped.append((line, reason))
        return
    fact = _absolute_dates(line.rstrip("。.!！ "), day)
    core = _DATE_PREFIX.sub("", fact)
    if any(core in existing for existing in memory_lines):
        plan.skipped.append((line, "already in memory"))
    elif fact in plan.added:
        plan.skipped.append((line, "said twice"))
    else:
        plan.added.append(fact)


def _skip_reason(line: str) -> str | None:
    if _SECRET.search(line):
        return "looks like a secret"
    if _QUESTION.search(line):
        return "a question"
    if _STRONG.search(line):
        return None
    if _WEAK.search(line) and not _REQUEST.search(line):
        return None
    return "a one-off request" if _REQUEST.search(line) else "nothing lasting"


def _absolute_dates(text: str, day: date) -> str:
    """``今天我们决定…`` said on 2026-11-30 → ``2026-11-30 我们决定…``."""
    for pattern, offset in _RELATIVE_DAYS:
        match = pattern.search(text)
        if match is None:
            continue
        before = text[: match.start()].rstrip(" ，,")
        after = _AFTER_REMOVED_WORD.sub("", text[match.end() :])
        spaced = before[-1:].isascii() and after[:1].isascii()
        rest = f"{before}{' ' if before and spaced else ''}{after}".strip()
        return f"{(day + timedelta(days=offset)).isoformat()} {rest}"
    return text


def _local_date(timestamp: object, zone: tzinfo) -> date | None:
    if not isinstance(timestamp, str):
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.astimezone(zone).date()


def _body_lines(text: str) -> list[str]:
    """The body lines of a memory file (frontmatter excluded), blank ones dropped."""
    try:
        _meta, body = frontmatter.parse(text)
    except frontmatter.FrontmatterError:
        body = text
    return [line for line in body.split("\n") if line.strip()]


def _unique_tail(text: str) -> str:
    """The shortest run of final lines (ending at the last non-blank one) that occurs once
    in ``text``: an ``old_string`` that appends exactly there."""
    lines = text.rstrip("\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for start in range(len(lines) - 1, -1, -1):
        tail = "\n".join(lines[start:])
        if text.count(tail) == 1:
            return tail
    return "\n".join(lines)
