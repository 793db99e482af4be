"""The <memory_update> reminder."""

from __future__ import annotations

from shared.memory.changes import memory_update_reminder

OLD = "a" * 40
NEW = "b" * 40


def test_reminder_names_short_shas_and_changed_files() -> None:
    assert memory_update_reminder(OLD, NEW, ["system/human.md", "notes/x.md"]) == (
        "<memory_update>\n"
        "Your memory changed since your last turn (aaaaaaa → bbbbbbb): "
        "system/human.md, notes/x.md.\n"
        "The system prompt now shows the current memory; "
        "it wins over anything older in this conversation.\n"
        "</memory_update>"
    )


def test_reminder_without_files_still_reports_the_move() -> None:
    text = memory_update_reminder(OLD, NEW, [])
    assert "(aaaaaaa → bbbbbbb).\n" in text
