"""The deterministic reflection model: the five phases as rules, played through the real loop.

Used for reflection when the model is ``mock``. It behaves like a model: every reply is
decided from the request alone (system prompt, task prompt, the tool calls made so far
and their results), and everything it knows about the payload and memory it learned
through its tools. So it runs unchanged inside :func:`shared.agent.loop.run_turn`, in
the sandbox, and a test of it is a test of the whole sub-agent path.

The steps, each one reply:
1. ``wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"``;
2. for a manifest, ``cat`` every slice it lists; and print + ``cat`` ``system/human.md``;
3. extract what lasts from the user's records (the rules are in
   :mod:`shared.providers.mock_reflector_plan`); changes go through ``edit_file``;
   nothing left → a report and no commit;
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

from shared.models.messages import AssistantMessage, Message, ToolCall, ToolResult
from shared.providers.base import ModelRequest, ModelResponse, Provider
from shared.providers.mock import DEFAULT_MOCK_CONTEXT_WINDOW, MOCK_MODEL, admit, respond
from shared.providers.mock_reflector_plan import (
    COMMIT,
    CREATE_HUMAN,
    HUMAN_FILE,
    bash,
    plan_changes,
)

READ_PAYLOAD = 'wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"'
READ_HUMAN = f'printf \'%s\\n\' "$MEMORY_DIR/{HUMAN_FILE}" && cat "$MEMORY_DIR/{HUMAN_FILE}"'
TRAILERS = ("Agent-ID", "Parent-Agent-ID", "Reflected-Messages", "Job-ID")
_EXIT_CODE = re.compile(r"\n?\[exit code \d+\]$")

_TODAY_LINE = re.compile(
    r"Today is (?P<date>\d{4}-\d{2}-\d{2}) \((?P<zone>[^,()]+), "
    r"UTC(?P<sign>[+-])(?P<hours>\d{2}):(?P<minutes>\d{2})\)"
)
_TRAILER_LINE = re.compile(rf"^(?P<key>{'|'.join(TRAILERS)}): (?P<value>\S.*)$", re.MULTILINE)


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
    calls = {
        call.id: call for m in messages if isinstance(m, AssistantMessage) for call in m.tool_calls
    }
    seen = _Seen()
    for message in messages:
        if not isinstance(message, ToolResult):
            continue
        call = calls.get(message.tool_call_id or "")
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
        return [bash(READ_PAYLOAD)]
    try:
        payload_path, records, slice_paths = _read_payload(seen.payload)
    except ValueError as exc:
        return f"Summary: I could not read the transcript ({exc}).\nCommit: none.\nIssues: {exc}"
    reads = [bash(f"cat {shlex.quote(path)}") for path in slice_paths if path not in seen.slices]
    if seen.human is None:
        reads.append(bash(READ_HUMAN))
    if reads or seen.human is None:
        return reads
    for path in slice_paths:
        try:
            records += _records(_json(seen.slices[path]))
        except ValueError as exc:
            return f"Summary: I could not read the slice {path} ({exc}).\nCommit: none."
    human_path, human = _human_file(seen.human)
    zone = _zone(timezone_name, request.system)
    plan = plan_changes(records, human, zone, _today(request.system, zone))
    if not plan.changed:
        return plan.report(commit="none: nothing worth keeping, so nothing was changed")
    if not seen.edit_results:
        return plan.changes(human_path, human)
    failures = [output for output, failed in seen.edit_results if failed]
    if failures:
        return plan.report(commit="none: an edit failed", issues=failures)
    if seen.commit is None:
        return [bash(plan.commit_command(payload_path, _trailers(request.messages)))]
    if _EXIT_CODE.search(seen.commit):
        return plan.report(commit="failed", issues=[seen.commit])
    return plan.report(commit=seen.commit.strip())


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
