"""Notes people add to memory and lines they take out: ``memory.remember`` and
``memory.forget`` (``agentctl remember|forget``, the web view's memory file page, MCP's
``remember``).

Both are user writes like a hand edit (:mod:`agentd.memory.edit`): under the memory lock,
so a turn's edit or a reflection's merge waits for them (and they for it), committed as
one commit each, with trailers the daemon writes (``Edited-By``, ``Via``, for MCP
``MCP-Client``: :func:`shared.memory.provenance.note_trailers`) and a subject in which the
outside text is one line (:func:`shared.memory.signing.one_line`), so ``memory why`` says
where a line came from and nobody's words can pose as a trailer. The next turn of every
conversation gets ``<memory_update>``, as for any memory commit.

Each commit holds only its own change: a checkout with uncommitted edits is refused
first (they would be swept into it, and a revert of it would undo them too). So a
``forget`` is one commit that ``agentctl memory revert`` undoes whole.

A note must keep memory within its size limits (:mod:`shared.memory.content`); one that
would not is refused, nothing written. ``forget`` removes the lines that were shown: the
request names the commit the listing was made at, and if the lines matching now are not
those (memory changed in between), nothing is removed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from agentd.daemon.agents import Agents
from agentd.daemon.replies import ForgetAnswer, ForgetListing, Forgotten, MemoryRemembered
from agentd.daemon.requests import MemoryForget, MemoryRemember
from agentd.memory.edit import (
    Written,
    editable_path,
    read_for_edit,
    write_and_commit,
    write_by_hand,
)
from shared.errors import MalformedRequest, MemoryConflict, NothingToForget
from shared.memory import content
from shared.memory.notes import (
    Line,
    holds_note,
    matching_lines,
    note_line,
    with_note,
    without_lines,
)
from shared.memory.provenance import (
    MCP_EMAIL,
    MCP_NAME,
    USER_EMAIL,
    USER_NAME,
    note_trailers,
    resolve_commit,
    with_trailers,
)
from shared.memory.repo import MemoryRepo
from shared.memory.signing import one_line

log = structlog.get_logger(__name__)

SUBJECT_NOTE_CHARS = 72
"""How much of a note or a pattern a commit's subject quotes."""

Found = list[tuple[str, Line]]
"""Matching lines, each with its file's path, in path and line order."""


class MemoryNotes:
    def __init__(self, agents: Agents) -> None:
        self.agents = agents

    async def remember(self, params: MemoryRemember) -> MemoryRemembered:
        """Append ``params.text`` as a ``- `` line to its file; the commit, or None if the
        file has that line already."""
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        path = editable_path(params.path)
        note = note_line(params.text)
        if not note:
            raise MalformedRequest("the note is empty once made one line of printable text")
        subject = f"remember: {_quoted(params.text)}"
        message = with_trailers(subject, note_trailers(params.via, params.client))
        author = (MCP_NAME, MCP_EMAIL) if params.via == "mcp" else (USER_NAME, USER_EMAIL)
        commit = await write_and_commit(
            repo,
            message,
            lambda: _remember(repo, path, note),
            author=author,
            where=repo.path / path,
            needed=len(note.encode()) + 1,
        )
        log.info("memory_remembered", agent_id=record.id, path=path, via=params.via, commit=commit)
        return MemoryRemembered(agent_id=record.id, path=path, line=note, commit=commit)

    async def forget(self, params: MemoryForget) -> ForgetAnswer:
        """The lines containing ``params.pattern``; with ``confirm``, removed in one commit."""
        record = await self.agents.resolve(params.agent)
        repo = self.agents.memory(record.id)
        path = editable_path(params.path) if params.path is not None else None
        if not params.confirm:
            head = repo.head()
            found = await asyncio.to_thread(_matching, repo, head, params.pattern, path)
            return ForgetAnswer(ForgetListing(agent_id=record.id, head=head, lines=_lines(found)))
        assert params.base is not None  # the request model requires it with confirm
        base = params.base
        shown = await asyncio.to_thread(
            lambda: _matching(repo, resolve_commit(repo, base), params.pattern, path)
        )
        if not shown:
            raise NothingToForget(
                f'no memory line contains "{_quoted(params.pattern)}"'
                f"{f' in {path}' if path else ''}; nothing was removed"
            )
        removed: Found = []
        count = f"{len(shown)} line{'' if len(shown) == 1 else 's'}"
        subject = f'forget: {count} containing "{_quoted(params.pattern)}"'
        commit = await write_and_commit(
            repo,
            with_trailers(subject, note_trailers(params.via)),
            lambda: _forget(repo, params.pattern, path, shown, removed),
            author=(USER_NAME, USER_EMAIL),
            where=repo.path,
            needed=0,
        )
        log.info("memory_forgot", agent_id=record.id, lines=len(removed), commit=commit)
        return ForgetAnswer(Forgotten(agent_id=record.id, commit=commit, lines=_lines(removed)))


def _remember(repo: MemoryRepo, path: str, note: str) -> list[Written]:
    """Under the lock: append ``note`` to ``path`` unless it is there. Blocking."""
    _refuse_uncommitted(repo, "nothing was remembered")
    start = read_for_edit(repo, path)
    if holds_note(start.text, note):
        return []
    text = with_note(start.text, note)
    _within_limits(repo, path, len(text.encode()))
    return [write_by_hand(repo, path, text, start.blob)]


def _forget(
    repo: MemoryRepo, pattern: str, path: str | None, shown: Found, removed: Found
) -> list[Written]:
    """Under the lock: remove the lines matching ``pattern`` if they are those ``shown``
    (the same texts in the same files and order; their numbers may have moved), and put
    them in ``removed``. Blocking."""
    _refuse_uncommitted(repo, "nothing was removed")
    now = _matching(repo, repo.head(), pattern, path)
    if [(p, line.text) for p, line in now] != [(p, line.text) for p, line in shown]:
        raise MemoryConflict(
            "memory changed since its lines were listed, and the lines that match now are "
            "not those; nothing was removed. Run forget again to see what matches now"
        )
    written: list[Written] = []
    try:
        for file in dict.fromkeys(p for p, _ in now):
            start = read_for_edit(repo, file)
            numbers = {line.line_no for p, line in now if p == file}
            text = without_lines(start.text, numbers)
            written.append(write_by_hand(repo, file, text, start.blob))
    except BaseException:
        for each in reversed(written):
            each.undo()
            each.forget()
        raise
    removed.extend(now)
    return written


def _matching(repo: MemoryRepo, rev: str, pattern: str, path: str | None) -> Found:
    """The body lines containing ``pattern`` of every memory file at ``rev`` (or of
    ``path`` alone). Blocking (git)."""
    files = {path: repo.show(path, rev)} if path is not None else repo.read_tree(rev)
    return [(file, line) for file, text in files.items() for line in matching_lines(text, pattern)]


def _refuse_uncommitted(repo: MemoryRepo, outcome: str) -> None:
    if uncommitted := repo.uncommitted():
        raise MemoryConflict(
            f"the memory checkout has uncommitted changes ({', '.join(uncommitted[:5])}); "
            f"{outcome}. Commit them with `agentctl memory commit` (or discard them), then "
            "try again"
        )


def _within_limits(repo: MemoryRepo, path: str, size: int) -> None:
    """Refuse a file of ``size`` bytes at ``path`` that would break memory's size limits."""
    limits = repo.limits
    if size > limits.file_bytes:
        violation = content.Violation("file_too_large", path, size, limits.file_bytes)
        raise content.error_for(violation, "Nothing was written")
    sizes = content.read_checkout(repo.path).sizes
    total = sum(sizes.values()) - sizes.get(path, 0) + size
    if total > limits.total_bytes:
        violation = content.Violation("memory_too_large", "", total, limits.total_bytes)
        raise content.error_for(violation, "Nothing was written")


def _lines(found: Found) -> list[dict[str, Any]]:
    return [{"path": path, "line_no": line.line_no, "text": line.text} for path, line in found]


def _quoted(text: str) -> str:
    """``text`` as a commit subject may quote it: one line, cut with … when long."""
    line = one_line(text, SUBJECT_NOTE_CHARS + 1)
    return line if len(line) <= SUBJECT_NOTE_CHARS else line[: SUBJECT_NOTE_CHARS - 1] + "…"
