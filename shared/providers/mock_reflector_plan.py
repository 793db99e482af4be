"""The mock reflector's judgement: which lines of user speech last, and the edits, commit
and report that keep them in ``system/human.md``.

Per line of a user record: durable statements (preference and decision markers such as
我更喜欢 / 以后 / 一律 / always / from now on) are kept; questions, one-off requests, anything
that looks secret and lines memory already has are skipped; 今天 / 昨天 / today / yesterday
become the record's date on the user's local calendar (``2026-11-30 …``); a correction
(别再叫我小陆了，叫我陆工) edits the line it corrects instead of appending.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from shared.errors import FrontmatterError
from shared.ids import new_id
from shared.memory import frontmatter
from shared.models.messages import ToolCall

HUMAN_FILE = "system/human.md"
CREATE_HUMAN = f'mkdir -p "$MEMORY_DIR/system" && cat > "$MEMORY_DIR/{HUMAN_FILE}"'
COMMIT = 'git -C "$MEMORY_DIR" add -A && git -C "$MEMORY_DIR" commit -q -F -'
SHOW_COMMIT = "git -C \"$MEMORY_DIR\" log -1 --format='%h %s'"
_HEREDOC = "REFLECTION_EOF"

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


def bash(command: str) -> ToolCall:
    return tool_call("bash", {"command": command})


def tool_call(name: str, args: dict[str, Any]) -> ToolCall:
    return ToolCall(id=new_id("call"), name=name, arguments=json.dumps(args, ensure_ascii=False))


@dataclass
class Plan:
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
            return [bash(f"{CREATE_HUMAN} <<'{_HEREDOC}'\n{text}{_HEREDOC}")]
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
    return tool_call("edit_file", args)


def plan_changes(
    records: list[dict[str, Any]], human: str | None, zone: tzinfo, today: date
) -> Plan:
    """The plan for ``records`` against the current ``human`` file (None: it is missing);
    a relative day is read on the user's calendar (``zone``), ``today`` if undated."""
    plan = Plan()
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


def _consider(plan: Plan, line: str, day: date, memory_lines: list[str]) -> None:
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
    except FrontmatterError:
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
