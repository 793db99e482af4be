"""Tell a conversation that its memory moved between two of its turns.

Earlier turns of a conversation may quote memory as it was; after a reflection merge, an
edit from another conversation or the user's own commit, the model must know the new
system prompt wins. The reminder names the files so it stays a couple of lines long.
"""

from __future__ import annotations

_SHORT_SHA = 7


def memory_update_reminder(old_head: str, new_head: str, files: list[str]) -> str:
    """The ``<memory_update>`` note for a turn whose memory HEAD moved from ``old_head``."""
    changed = f": {', '.join(files)}" if files else ""
    return (
        "<memory_update>\n"
        "Your memory changed since your last turn "
        f"({old_head[:_SHORT_SHA]} → {new_head[:_SHORT_SHA]}){changed}.\n"
        "The system prompt now shows the current memory; "
        "it wins over anything older in this conversation.\n"
        "</memory_update>"
    )
