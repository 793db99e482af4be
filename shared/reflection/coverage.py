"""Which part of a payload a reflection sub-agent actually read.

Naming ``$TRANSCRIPT_PATH`` in a command is not reading it: ``wc -c``, ``ls``, ``printf``
or ``head -c 10`` mention the payload and show the model none of it. What counts is what
came back: the tool *results* the sub-agent received. A message was read when its text,
exactly as written into the payload, appears in a tool result — quoted as JSON (``cat``,
``jq '.[].content'``, ``grep``) or raw (``jq -r``); a short text only as a whole line or a
quoted JSON string, so that a one-word message is not "seen" inside unrelated output.
A part was opened when its meta record's nonce came back. (A message whose text memory
already holds word for word may count as seen through ``cat`` of a memory file: it is
known either way.)

A reflection consumes a slice only as far as it read it: up to the first user message it
never saw, or the first line of the log that is not a message (its ``unreadable`` record
may hold the user's words) it never saw. Everything after is left for the next
reflection, so a fact shown to nobody is never marked reflected.
"""

from __future__ import annotations

import json

from shared.reflection.payload import PayloadFile, SlicePayload
from shared.reflection.slices import Slice

MIN_RAW_MATCH_CHARS = 24
"""Shorter texts count as seen raw only as a whole line: ``ok`` is inside anything."""


def _appears(text: str, output: str) -> bool:
    if json.dumps(text, ensure_ascii=False) in output:
        return True
    if len(text) >= MIN_RAW_MATCH_CHARS:
        return text in output
    return f"\n{text}\n" in output


class Reading:
    """What the tool results of one run showed of one payload."""

    def __init__(self, payload: PayloadFile, tool_results: list[str]) -> None:
        self.payload = payload
        self._output = "\n" + "\n".join(tool_results) + "\n"
        self.seen: set[str] = {
            message.id
            for shown in payload.slices
            for message in shown.shown
            if message.text and _appears(message.text, self._output)
        }

    @property
    def touched(self) -> bool:
        """Did any tool result carry anything of the payload (a message or a part's nonce)?"""
        return bool(self.seen) or any(
            nonce in self._output for shown in self.payload.slices for nonce in shown.nonces
        )

    def consumed(self, shown: SlicePayload) -> Slice | None:
        """How far ``shown`` was read: through the last message before the first user
        message (or unreadable line) that no tool result showed (assistant replies ride
        along: the user's words are what a reflection must not skip). None when nothing of
        the payload came back at all, or the slice's first user message did not."""
        if not self.touched:
            return None
        through = None
        for message in shown.shown:
            must_read = message.role in ("user", "unreadable") and message.text
            if must_read and message.id not in self.seen:
                break
            if message.role != "unreadable":
                through = message
        if through is None:
            return None
        complete = through.end_offset == shown.slice.end_offset
        return shown.slice if complete else shown.through(through)
