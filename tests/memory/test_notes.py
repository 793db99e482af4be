"""Notes as text: a note is one ``- `` line whatever was sent, forgetting matches body lines
only, and a file keeps every byte it had but the lines taken out."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.memory import frontmatter
from shared.memory.notes import (
    MAX_NOTE_CHARS,
    Line,
    body_lines,
    holds_note,
    matching_lines,
    note_line,
    with_note,
    without_lines,
)

HUMAN = "---\nname: human\ndescription: What I know about coffee drinkers.\n---\n\n- Ada\n"


def test_a_note_is_one_bullet_line_of_printable_text() -> None:
    assert note_line("I take my coffee black") == "- I take my coffee black"
    assert note_line("  two\nlines\r\n\tand a bell\x07 ") == "- two lines and a bell"
    assert note_line("x" * (MAX_NOTE_CHARS + 50)) == "- " + "x" * MAX_NOTE_CHARS
    assert note_line(" \n\t\x00") == ""


def test_a_note_that_would_close_the_frontmatter_or_add_lines_stays_one_line() -> None:
    hostile = "fine\n---\ndescription: pwned\n---\n- and another fact"
    text = with_note(HUMAN, note_line(hostile))

    meta, body = frontmatter.parse(text)
    assert meta["description"] == "What I know about coffee drinkers."
    assert body.strip().splitlines()[-1].startswith("- fine --- description: pwned")
    assert len(text.splitlines()) == len(HUMAN.splitlines()) + 1


def test_a_note_goes_after_the_last_line_and_a_file_without_a_final_newline_gets_one() -> None:
    assert with_note(HUMAN, "- tea") == HUMAN + "- tea\n"
    assert with_note("- a", "- b") == "- a\n- b\n"
    assert with_note("", "- b") == "- b\n"


def test_a_note_joins_the_list_rather_than_sitting_behind_trailing_blank_lines():
    assert with_note("- a\n- b\n\n\n", "- c") == "- a\n- b\n- c\n"
    assert with_note("- a\n  \n", "- c") == "- a\n- c\n"
    assert with_note("- a  \n\n", "- c") == "- a  \n- c\n"  # the last line's bytes kept
    assert with_note("---\nname: human\n---\n\n", "- c") == "---\nname: human\n---\n\n- c\n"
    assert holds_note(with_note(HUMAN, "- tea"), "- tea")
    assert not holds_note(HUMAN, "- tea")


def test_forgetting_matches_body_lines_case_insensitively_never_the_frontmatter() -> None:
    text = HUMAN + "- Coffee, black\n- tea\n"

    assert matching_lines(text, "COFFEE") == [Line(7, "- Coffee, black")]
    assert matching_lines(text, "description") == []
    assert matching_lines(text, "   ") == []


def test_a_file_without_frontmatter_or_with_an_unclosed_one_is_all_body() -> None:
    assert body_lines("a\nb") == [Line(1, "a"), Line(2, "b")]
    assert body_lines("---\nname: x\nno end") == [
        Line(1, "---"),
        Line(2, "name: x"),
        Line(3, "no end"),
    ]


def test_lines_are_numbered_as_git_counts_them_at_newlines_only() -> None:
    text = "a\x0bstill a\nb\u2028still b\nc"

    assert [line.line_no for line in body_lines(text)] == [1, 2, 3]
    assert without_lines(text, {2}) == "a\x0bstill a\nc"


def test_removing_lines_keeps_every_other_byte() -> None:
    text = "---\r\nname: x\r\n---\r\n- keep\r\n- drop\r\n- keep too"

    assert without_lines(text, {5}) == "---\r\nname: x\r\n---\r\n- keep\r\n- keep too"
    assert without_lines(text, {6}) == "---\r\nname: x\r\n---\r\n- keep\r\n- drop\r\n"


@given(st.text(alphabet="ab \r\t\n-\x0b", max_size=60), st.data())
def test_removing_lines_leaves_exactly_the_others_byte_for_byte(
    text: str, data: st.DataObject
) -> None:
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    chosen = data.draw(st.sets(st.integers(1, max(1, len(lines)))))

    kept = without_lines(text, chosen)

    assert kept == "".join(line for n, line in enumerate(lines, 1) if n not in chosen)
