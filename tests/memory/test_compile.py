"""System prompt compilation from committed memory files."""

from __future__ import annotations

from shared.memory.compile import compile_system_prompt, human_facts
from shared.memory.frontmatter import render

MEMORY_DIR = "/data/agents/a1/memory"
FILES = {
    "system/persona.md": render({"description": "Who I am."}, "I am Ada.\n\n"),
    "system/human.md": render({"description": "About the user."}, "- Name: Sam\n- Likes tea\n"),
    "system/style.md": "no frontmatter here\n",
    "notes/trip.md": render({"description": "Trip\nplans"}, "SECRET NOTE BODY\n"),
    "system/broken.md": "---\ndescription: never closed\n",
}


def test_compile_appends_listing_and_system_bodies_after_the_base_prompt() -> None:
    prompt = compile_system_prompt("You are helpful.  \n\n", FILES, MEMORY_DIR)
    assert prompt == (
        "You are helpful.\n"
        "\n"
        '<memory dir="/data/agents/a1/memory">\n'
        "Memory files (path: description; system/ files are shown in full):\n"
        "- notes/trip.md: Trip plans\n"
        "- system/broken.md: (unreadable frontmatter)\n"
        "- system/human.md: About the user.\n"
        "- system/persona.md: Who I am.\n"
        "- system/style.md: (no description)\n"
        '<file path="system/persona.md">\n'
        "I am Ada.\n"
        "</file>\n"
        '<file path="system/broken.md">\n'
        "---\n"
        "description: never closed\n"
        "</file>\n"
        '<file path="system/human.md">\n'
        "- Name: Sam\n"
        "- Likes tea\n"
        "</file>\n"
        '<file path="system/style.md">\n'
        "no frontmatter here\n"
        "</file>\n"
        "</memory>"
    )


def test_compile_leaves_out_non_system_bodies() -> None:
    prompt = compile_system_prompt("base", FILES, MEMORY_DIR)
    assert "SECRET NOTE BODY" not in prompt
    assert "- notes/trip.md: Trip plans" in prompt


def test_compile_is_deterministic_and_names_memory_as_the_tools_do() -> None:
    first = compile_system_prompt("base", FILES, MEMORY_DIR)
    assert first == compile_system_prompt("base", dict(reversed(FILES.items())), MEMORY_DIR)
    assert '<memory dir="/memory">' in compile_system_prompt("base", {}, "/memory")


def test_compile_with_an_empty_base_prompt_starts_with_memory() -> None:
    assert compile_system_prompt("  ", {}, MEMORY_DIR).startswith("<memory ")


def test_human_facts_are_the_bullets_of_the_human_block() -> None:
    prompt = compile_system_prompt("- not a fact", FILES, MEMORY_DIR)
    assert human_facts(prompt) == ["Name: Sam", "Likes tea"]


def test_human_facts_of_a_prompt_without_human_block_are_empty() -> None:
    assert human_facts("You are helpful.") == []
    empty = {"system/human.md": render({"description": "d"}, "")}
    assert human_facts(compile_system_prompt("base", empty, MEMORY_DIR)) == []
