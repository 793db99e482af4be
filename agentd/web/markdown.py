"""Memory files as HTML, block by block, each block knowing the file lines it came from.

The blocks are what the provenance gutter lines up with: a paragraph written over three
lines renders as one paragraph beside three gutter marks. Memory is written by a model
and merged from reflections, so it is untrusted: raw HTML is disabled (a ``<script>`` in
a memory file shows as text) and markdown-it's link check refuses ``javascript:``,
``vbscript:``, ``file:`` and non-image ``data:`` URLs. The page's Content-Security-Policy
forbids inline script besides.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from markdown_it import MarkdownIt
from markupsafe import Markup

_FRONTMATTER = "---"

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


@dataclass(frozen=True, slots=True)
class Block:
    start: int
    """The first file line it came from, counted from 0."""
    end: int
    """One past its last file line."""
    html: Markup
    frontmatter: bool = False


def render_blocks(text: str) -> list[Block]:
    """``text`` (a memory file) as rendered blocks in file order; a frontmatter block is
    shown as it is written, not rendered."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    blocks: list[Block] = []
    body_start = 0
    closing = _frontmatter_end(lines)
    if closing is not None:
        shown = escape("\n".join(lines[: closing + 1]))
        blocks.append(Block(0, closing + 1, Markup(f"<pre>{shown}</pre>"), frontmatter=True))
        body_start = closing + 1
    env: dict[str, object] = {}
    tokens = _MARKDOWN.parse("\n".join(lines[body_start:]), env)
    position = 0
    while position < len(tokens):
        first = tokens[position]
        after = position + 1
        depth: int = first.nesting
        while depth > 0:
            depth += tokens[after].nesting
            after += 1
        start, end = first.map or (0, 0)
        html = _MARKDOWN.renderer.render(tokens[position:after], _MARKDOWN.options, env)
        blocks.append(Block(body_start + start, body_start + end, Markup(html)))
        position = after
    return blocks


def _frontmatter_end(lines: list[str]) -> int | None:
    """The line closing a frontmatter block the file opens with, if it has one."""
    if lines[0].rstrip() != _FRONTMATTER:
        return None
    for index in range(1, len(lines)):
        if lines[index].rstrip() == _FRONTMATTER:
            return index
    return None
