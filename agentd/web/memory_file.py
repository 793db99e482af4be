"""One memory file for the web view: its Markdown blocks, each beside the commits that
last wrote its lines (the provenance gutter).

The text and the blame are read at one commit, so a merge landing between the two reads
cannot pair a line with another version's commit. Blocking (git): run
:func:`read_memory_file` in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.web.markdown import Block, render_blocks
from shared.memory.provenance import BlamedLine, blame
from shared.memory.repo import MemoryRepo, validate_memory_path


@dataclass(frozen=True, slots=True)
class Row:
    block: Block
    lines: list[BlamedLine]
    """The block's non-blank lines, each with its commit."""


@dataclass(frozen=True, slots=True)
class MemoryFile:
    path: str
    head: str
    rows: list[Row]


def read_memory_file(repo: MemoryRepo, path: str) -> MemoryFile:
    path = validate_memory_path(path)
    head = repo.head()
    text = repo.show(path, head)
    blamed = {line.line_no: line for line in blame(repo, path, head)}
    rows = []
    for block in render_blocks(text):
        numbers = range(block.start + 1, block.end + 1)
        lines = [blamed[n] for n in numbers if n in blamed and blamed[n].text.strip()]
        rows.append(Row(block, lines))
    return MemoryFile(path, head, rows)
