"""Committed memory → the system prompt, kept small because it rides along on every request.

With a 1,200-token context window the whole system prompt and the tool schemas share about
500 tokens, so memory is one listing line per file plus the full text of ``system/`` files
only; everything else the agent reads on demand with ``read_file``. The output is a pure
function of its inputs, so an unchanged memory HEAD gives a byte-identical prompt (and a
warm prefix cache).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from shared.errors import FrontmatterError
from shared.memory.frontmatter import Meta, parse

PERSONA_PATH = "system/persona.md"
HUMAN_PATH = "system/human.md"
SYSTEM_DIR = "system/"

_LISTING_HEADER = "Memory files (path: description; system/ files are shown in full):"
_NO_DESCRIPTION = "(no description)"
_UNREADABLE = "(unreadable frontmatter)"
_HUMAN_BLOCK = re.compile(r'<file path="system/human\.md">\n(.*?)</file>', re.DOTALL)


class _Entry(NamedTuple):
    path: str
    description: str
    body: str


def compile_system_prompt(base_prompt: str, files: dict[str, str], memory_dir: str) -> str:
    """``base_prompt`` followed by the ``<memory>`` block built from ``files`` (path → text).

    ``memory_dir`` is the checkout as the agent's tools name it: ``/memory`` where its shell
    runs in bubblewrap, the absolute host path where it runs bare
    (:func:`shared.agent.tools.view.memory_name`)."""
    entries = [_entry(path, text) for path, text in sorted(files.items())]
    lines = [f'<memory dir="{memory_dir}">', _LISTING_HEADER]
    lines += [f"- {entry.path}: {entry.description}" for entry in entries]
    system = [entry for entry in entries if entry.path.startswith(SYSTEM_DIR)]
    for entry in sorted(system, key=lambda e: (e.path != PERSONA_PATH, e.path)):
        lines.append(f'<file path="{entry.path}">')
        if entry.body:
            lines.append(entry.body)
        lines.append("</file>")
    lines.append("</memory>")
    return "\n\n".join(part for part in (base_prompt.rstrip(), "\n".join(lines)) if part)


def human_facts(system_prompt: str) -> list[str]:
    """The ``- `` items of ``system/human.md`` as shown in a compiled prompt, bullets removed."""
    match = _HUMAN_BLOCK.search(system_prompt)
    if match is None:
        return []
    lines = match.group(1).split("\n")
    return [line[2:].strip() for line in lines if line.startswith("- ") and line[2:].strip()]


def _entry(path: str, text: str) -> _Entry:
    try:
        meta, body = parse(text)
    except FrontmatterError:
        return _Entry(path, _UNREADABLE, text.strip())
    return _Entry(path, _description(meta), body.strip())


def _description(meta: Meta) -> str:
    value = meta.get("description", "")
    text = " ".join(value) if isinstance(value, list) else value
    return " ".join(text.split()) or _NO_DESCRIPTION
