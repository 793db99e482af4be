"""Frontmatter parsing and rendering of memory files."""

from __future__ import annotations

import pytest

from shared.errors import AgentdError, FrontmatterError
from shared.memory.frontmatter import parse, render


def test_parse_splits_meta_and_body() -> None:
    text = "---\nname: human\ndescription: 'What I know: a lot.'\n---\n- Likes tea\n"
    assert parse(text) == (
        {"name": "human", "description": "What I know: a lot."},
        "- Likes tea\n",
    )


def test_parse_strips_bom_and_normalises_crlf() -> None:
    meta, body = parse("\ufeff---\r\ndescription: d\r\n---\r\nline 1\r\nline 2\r\n")
    assert meta == {"description": "d"}
    assert body == "line 1\nline 2\n"


def test_a_file_without_frontmatter_is_all_body() -> None:
    assert parse("# Title\n\ntext\n") == ({}, "# Title\n\ntext\n")
    assert parse("") == ({}, "")


def test_scalars_become_strings_and_sequences_lists_of_strings() -> None:
    meta, _ = parse("---\nread_only: true\nlimit: 5\nempty:\ntags:\n  - a\n  - 2\n---\n")
    assert meta == {"read_only": "true", "limit": "5", "empty": "", "tags": ["a", "2"]}


def test_an_empty_block_is_empty_meta() -> None:
    assert parse("---\n---\nbody") == ({}, "body")


def test_unclosed_frontmatter_is_an_error() -> None:
    with pytest.raises(FrontmatterError, match="not closed"):
        parse("---\ndescription: d\nbody without end\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\n- a\n- b\n---\n", "'key: value' lines, got a list"),
        ("---\njust text\n---\n", "got a str"),
        ("---\nkey: [unclosed\n---\n", "not valid YAML"),
        ("---\ndescription: Notes: trip\n---\n", "quote values that contain ': '"),
        ("---\nnested:\n  a: 1\n---\n", "nested structure"),
    ],
)
def test_non_mapping_or_broken_frontmatter_is_an_error(text: str, message: str) -> None:
    with pytest.raises(FrontmatterError, match=message):
        parse(text)


def test_frontmatter_error_is_an_agentd_error() -> None:
    assert issubclass(FrontmatterError, AgentdError)


def test_render_round_trips_through_parse() -> None:
    meta = {"name": "notes", "description": "Keys: with colons, # and 'quotes' " + "x" * 120}
    text = render(meta, "body\n")
    assert text.startswith("---\nname: notes\n")
    assert parse(text) == (meta, "body\n")


def test_render_without_meta_is_the_body() -> None:
    assert render({}, "plain\n") == "plain\n"
