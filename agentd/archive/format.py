"""What an agentd export archive holds, and how big each part of it may be.

The archive is a ``.tar.gz`` of the agent's record (``agent.json``), its memory repo as a
git bundle of ``main`` (``memory.bundle``), each conversation's files under
``conversations/<id>/`` with the names they have in an agent's directory, and a
manifest. Nothing else is ever part of one, so an import refuses any other member.

Every member has a limit from what an export can hold, checked against its header before
a byte of it is unpacked, and all of them together have one: a small archive that
unpacks to gigabytes of zeros is refused at the first member that would pass its share.
The conversation logs are bounded by the total only, line by line
(:data:`MAX_LINE_BYTES`), since a long history is what an agent is for.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from shared.ids import ID_PATTERN, new_id
from shared.store.layout import AgentFiles, ArchiveFiles, ConversationFiles, Layout

ARCHIVE_FORMAT = 1
MAX_UNPACKED_BYTES = 8 * 1024**3
"""Largest total its members may unpack to: a small archive of zeros does not fill the disk."""
MAX_MEMBERS = 100_000
MAX_LINE_BYTES = 64 * 1024**2
"""Longest line of a conversation log. The longest message an agent writes is a tool
result, cut at a fifth of its window at 4 characters a token: 8 M characters for the
largest window (``MAX_CONTEXT_WINDOW``), at most 6 bytes each in JSON."""
STALE_STAGING_S = 24 * 3600.0
"""Staging left by an export or import whose process died is removed after a day."""

_ROOT = Path("")
_AGENT = AgentFiles(_ROOT)
_ARCHIVE = ArchiveFiles(_ROOT)
_CONVERSATION = ConversationFiles(_ROOT)

AGENT_RECORD = _AGENT.record.as_posix()
MANIFEST = _ARCHIVE.manifest.as_posix()
MEMORY_BUNDLE = _ARCHIVE.memory_bundle.as_posix()
CONVERSATIONS = _AGENT.conversations.as_posix()
CONVERSATION_RECORD = _CONVERSATION.record.name
MESSAGES = _CONVERSATION.messages.name
CONTEXT = _CONVERSATION.context.name
REFLECTION_STATE = _CONVERSATION.reflection_state.name

TOP_FILE_LIMITS = {
    AGENT_RECORD: 1024**2,  # a system prompt of 50,000 characters, escaped
    MANIFEST: 8 * 1024**2,  # the ids of as many conversations as MAX_MEMBERS allows
    MEMORY_BUNDLE: MAX_UNPACKED_BYTES,  # the whole history: the total bounds it
}
CONVERSATION_FILE_LIMITS = {
    CONVERSATION_RECORD: 64 * 1024,
    CONTEXT: 16 * 1024**2,  # the ids of a window of up to MAX_CONTEXT_WINDOW tokens
    REFLECTION_STATE: 64 * 1024,
    MESSAGES: MAX_UNPACKED_BYTES,  # the history: the total bounds it, MAX_LINE_BYTES each line
}
"""The files of a conversation an archive carries, and the most each may hold."""


class Manifest(BaseModel):
    format: int
    agentd_version: str
    agent_id: str
    name: str
    exported_at: datetime
    memory_head: str
    conversations: list[str]


@dataclass(frozen=True)
class MemberName:
    """Where a member belongs: a top-level file (``conversation`` None), a conversation's
    file, or a directory (``file`` None)."""

    path: str
    conversation: str | None = None
    file: str | None = None

    @property
    def limit(self) -> int:
        if self.file is None:
            return 0
        if self.conversation is None:
            return TOP_FILE_LIMITS[self.file]
        return CONVERSATION_FILE_LIMITS[self.file]


def member_name(name: str) -> MemberName | None:
    """What the member ``name`` is in an export, or None if an export never holds it."""
    name = name.removesuffix("/")
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return None
    if len(parts) == 1:
        if name in TOP_FILE_LIMITS:
            return MemberName(name, file=name)
        return MemberName(name) if name == CONVERSATIONS else None
    if parts[0] != CONVERSATIONS or not ID_PATTERN.fullmatch(parts[1]) or len(parts) > 3:
        return None
    if len(parts) == 2:
        return MemberName(name, conversation=parts[1])
    return MemberName(name, parts[1], parts[2]) if parts[2] in CONVERSATION_FILE_LIMITS else None


def new_staging(layout: Layout, kind: str) -> Path:
    layout.staging_dir.mkdir(mode=0o700, exist_ok=True)
    path = layout.staging_dir / new_id(kind)
    path.mkdir(mode=0o700)
    return path


def sweep_staging(layout: Layout) -> None:
    """Remove what an export or import left in ``staging/`` when its process died."""
    if not layout.staging_dir.is_dir():
        return
    cutoff = time.time() - STALE_STAGING_S
    for entry in layout.staging_dir.iterdir():
        with contextlib.suppress(OSError):
            if entry.lstat().st_mtime < cutoff:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
