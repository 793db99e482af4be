"""Frontmatter of memory files: a ``---`` / YAML mapping / ``---`` block before the body.

The description in it is what the system prompt lists for every file, so a file must be
readable by everyone who touches memory (daemon, reflector, the user's editor): BOMs and
CRLF line ends are tolerated, and a broken block is an error that says what is wrong
rather than a silently empty description.
"""

from __future__ import annotations

from typing import Any

import yaml

from shared.errors import FrontmatterError

Meta = dict[str, str | list[str]]

_DELIMITER = "---"


def parse(text: str) -> tuple[Meta, str]:
    """Split ``text`` into (frontmatter, body); without frontmatter that is ``({}, text)``.

    Scalars come back as strings (``true`` → ``"true"``, empty → ``""``), sequences as lists
    of strings, so callers never meet YAML's dates, numbers or ``None``.
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[0].rstrip() != _DELIMITER:
        return {}, text
    end = _closing_line(lines)
    try:
        loaded = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise FrontmatterError(
            f"frontmatter is not valid YAML (quote values that contain ': ' or start with "
            f"a special character): {exc}"
        ) from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise FrontmatterError(
            f"frontmatter must be 'key: value' lines, got a {type(loaded).__name__}"
        )
    return _normalise(loaded), "\n".join(lines[end + 1 :])


def render(meta: Meta, body: str) -> str:
    """The file text for ``meta`` and ``body``; no block at all when ``meta`` is empty."""
    if not meta:
        return body
    block = yaml.safe_dump(
        dict(meta), sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**9
    )
    return f"{_DELIMITER}\n{block}{_DELIMITER}\n{body}"


def _closing_line(lines: list[str]) -> int:
    for index in range(1, len(lines)):
        if lines[index].rstrip() == _DELIMITER:
            return index
    raise FrontmatterError(
        "frontmatter is not closed: the file starts with '---' but no later line is '---'"
    )


def _normalise(loaded: dict[Any, Any]) -> Meta:
    meta: Meta = {}
    for key, value in loaded.items():
        if isinstance(value, list):
            meta[str(key)] = [_scalar(key, item) for item in value]
        else:
            meta[str(key)] = _scalar(key, value)
    return meta


def _scalar(key: object, value: object) -> str:
    if isinstance(value, dict | list):
        raise FrontmatterError(
            f"frontmatter key {key!r} holds a nested structure; use a string or a list of strings"
        )
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
