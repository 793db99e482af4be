"""Notes people add to memory and lines they take out of it, as text (no git here).

A **note** (``agentctl remember``, the web view, an MCP host's ``remember``) is one
``- `` bullet line appended to a file's body, the form the agent's memory keeps facts in
(``system/human.md``: what it knows about the user, compiled into every prompt, the file
reflections consolidate preferences into). One line, whatever was sent: newlines and
control characters become spaces, so a note can never open a frontmatter block, end the
file's body or look like several facts.

**Forgetting** matches lines of the body as ``agentctl memory why`` does (the pattern as
plain text, case-insensitive) and never a frontmatter line: taking ``description:`` out
would break the file for everyone who reads it. Everything else in the file is kept byte
for byte, line ends included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.memory.signing import one_line

NOTE_PREFIX = "- "
MAX_NOTE_CHARS = 2_000
"""A note is a fact, not a document: put long text in a file of its own."""


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a memory file: its 1-based number and its text (no line end)."""

    line_no: int
    text: str


_TRAILING_BLANK_LINES = re.compile(r"(?:\r?\n[ \t]*)+\Z")
"""The line ends at the end of a text, with the blank lines among them."""


def note_line(text: str) -> str:
    """``text`` as the bullet it is kept as (no line end); empty if nothing printable is
    left of it."""
    note = one_line(text, MAX_NOTE_CHARS)
    return f"{NOTE_PREFIX}{note}" if note else ""


def holds_note(text: str, note: str) -> bool:
    """Whether the body of ``text`` has the line ``note`` already."""
    return any(line.text.strip() == note for line in body_lines(text))


def with_note(text: str, note: str) -> str:
    """``text`` with the line ``note`` appended at the end of its body. A body that holds
    lines already gets it right after the last of them, so a note joins the list above it
    rather than sitting apart behind the blank lines a file (or a reflection) ended with;
    an empty body keeps its layout (the blank line under a front matter)."""
    if any(line.text.strip() for line in body_lines(text)):
        text = _TRAILING_BLANK_LINES.sub("", text)
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{note}\n"


def matching_lines(text: str, pattern: str) -> list[Line]:
    """The body lines of ``text`` that contain ``pattern`` (case-insensitive; a blank
    pattern matches nothing)."""
    needle = pattern.strip().casefold()
    if not needle:
        return []
    return [line for line in body_lines(text) if needle in line.text.casefold()]


def without_lines(text: str, line_nos: set[int]) -> str:
    """``text`` without the lines numbered ``line_nos`` (1-based), the rest untouched."""
    return "".join(line for number, line in enumerate(_split(text), 1) if number not in line_nos)


def body_lines(text: str) -> list[Line]:
    """The lines of ``text`` after its frontmatter block (all of them if it has none or
    an unclosed one), numbered as in the file (as git counts them: at ``\n``)."""
    lines = [line.rstrip("\r\n") for line in _split(text.removeprefix("\ufeff"))]
    start = _body_start(lines)
    return [Line(number, line) for number, line in enumerate(lines, 1) if number > start]


def _split(text: str) -> list[str]:
    """``text``'s lines, each with its ``\n`` (the last may have none)."""
    lines = text.split("\n")
    ended = [line + "\n" for line in lines[:-1]]
    return [*ended, lines[-1]] if lines[-1] else ended


def _body_start(lines: list[str]) -> int:
    """How many lines the frontmatter block takes (0: none, or it is never closed)."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            return index + 1
    return 0
