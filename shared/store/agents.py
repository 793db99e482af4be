"""Agent records (``agents/<id>/agent.json``): create, read, list, update.

A record that is unreadable, or missing from a directory that holds an agent's data, is
never taken for "no such agent": answering that would let the caller create a new agent
(the default one, on a plain ``agentctl chat``) beside the one whose record is damaged.
Such an agent is refused with the path and how to restore it; the others are unaffected.

For a missing record, the refusal offers a replacement rebuilt from what the directory
holds (``agent.json.rebuilt``: the id, the name its memory repo was created with, the
most recently active conversation as the default, everything else at its default) for
the user to review and move into place, besides restoring the original from a backup.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import structlog

from shared.clock import utc_now
from shared.errors import AgentRecordMissing, CorruptStateFile, NameTaken, StoreError, UnknownAgent
from shared.ids import ID_PATTERN
from shared.models.agents import BASE_SYSTEM_PROMPT, AgentRecord
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import AgentFiles, ConversationFiles, Layout
from shared.store.trash import move_to_trash

log = structlog.get_logger(__name__)

_CREATING = ".creating"
"""Marks an agent directory whose record is not written yet (a crash there leaves only
the default memory and an empty conversation: nothing to restore, so it is ignored)."""

_REBUILT_SUFFIX = ".rebuilt"


_FileKey = tuple[int, int, int, int]


def _file_key(path: Path) -> _FileKey | None:
    """What changes whenever the file is replaced (atomically: a new inode) or written."""
    try:
        stat = os.stat(path)
    except (OSError, ValueError):  # ValueError: a name no path can hold (a NUL in it)
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size)


@dataclass
class AgentScan:
    """Every agent directory, sorted into readable records and the damaged ones."""

    records: list[AgentRecord] = field(default_factory=list)
    corrupt: list[CorruptStateFile] = field(default_factory=list)
    missing: list[AgentRecordMissing] = field(default_factory=list)

    @property
    def damaged(self) -> list[StoreError]:
        return [*self.corrupt, *self.missing]


class AgentStore:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._read: dict[str, tuple[_FileKey, AgentRecord]] = {}
        """Each record as last read or saved, with what its file looked like then: every
        request resolves its agent, and parsing the record each time was a tenth of the
        daemon's event-loop time under a load of chats. A record replaced on disk (by
        hand, say) is a new file, so it is read again."""

    def get(self, agent_id: str) -> AgentRecord:
        return self._get(agent_id, _file_key(self.layout.agent_file(agent_id)))

    def _get(self, agent_id: str, key: _FileKey | None) -> AgentRecord:
        """The record, from what was last read if its file is still ``key``."""
        path = self.layout.agent_file(agent_id)
        known = self._read.get(agent_id)
        if key is not None and known is not None and known[0] == key:
            return known[1].model_copy(deep=True)
        record = read_model(path, AgentRecord)
        if record is None:
            self._read.pop(agent_id, None)
            missing = self._missing(self.layout.agent_dir(agent_id))
            if missing is not None:
                raise missing
            raise UnknownAgent(f"no agent {agent_id!r}; list agents with `agentctl agents list`")
        if key is not None:
            self._read[agent_id] = (key, record.model_copy(deep=True))
        return record

    def list(self) -> list[AgentRecord]:
        """Every readable agent; damaged ones are logged (with what to do) and left out."""
        scan = self.scan()
        for error in scan.damaged:
            log.error("agent_record_damaged", code=error.code, error=error.message)
        return scan.records

    def scan(self) -> AgentScan:
        scan = AgentScan()
        if not self.layout.agents_dir.is_dir():
            return scan
        for child in sorted(self.layout.agents_dir.iterdir()):
            if not ID_PATTERN.fullmatch(child.name):
                continue
            try:
                record = read_model(AgentFiles(child).record, AgentRecord)
            except CorruptStateFile as exc:
                scan.corrupt.append(exc)
                continue
            if record is not None:
                scan.records.append(record)
            elif (missing := self._missing(child)) is not None:
                scan.missing.append(missing)
        return scan

    def find(self, ref: str) -> AgentRecord:
        """An agent by id or by name.

        A name that matches no readable agent while some agent is damaged raises that
        damage rather than "unknown": the agent asked for may be the damaged one, and
        answering "unknown" would let a caller create a second agent of that name.
        """
        key = _file_key(self.layout.agent_file(ref))
        if key is not None:  # an id (one stat: every request resolves its agent)
            return self._get(ref, key)
        scan = self.scan()
        for record in scan.records:
            if record.name == ref:
                return record
        for missing in scan.missing:
            if Path(missing.path).name == ref:
                raise missing
        if scan.damaged:
            raise scan.damaged[0]
        raise UnknownAgent(f"no agent named or with id {ref!r}; see `agentctl agents list`")

    def ensure_name_free(self, name: str, *, except_id: str | None = None) -> None:
        """Raise :class:`NameTaken` if another agent has ``name`` as its name or its id
        (an agent is found by either: one would hide the other)."""
        scan = self.scan()
        for record in scan.records:
            if record.id == except_id:
                continue
            if record.name == name:
                raise NameTaken(f"an agent named {name!r} exists already ({record.id})")
            if record.id == name:
                raise NameTaken(
                    f"{name!r} is the id of agent {record.name!r}; names and ids "
                    "of agents must differ"
                )
        if scan.damaged:
            raise scan.damaged[0]

    def save(self, record: AgentRecord) -> None:
        record.updated_at = utc_now()
        path = self.layout.agent_file(record.id)
        write_model_atomic(path, record)
        key = _file_key(path)
        if key is not None:
            self._read[record.id] = (key, record.model_copy(deep=True))

    def trash(self, agent_id: str, when: datetime) -> Path:
        """Move the agent's whole directory to the trash; where it went."""
        return move_to_trash(self.layout, self.layout.agent_dir(agent_id), agent_id, when)

    @contextlib.contextmanager
    def creating(self, agent_id: str) -> Iterator[Path]:
        """A new agent's directory, to fill and then :meth:`save` the record into.

        Until the body ends the directory is marked as being created, so a scan meanwhile
        does not take it for an agent whose record is missing; if the body raises, the
        directory is removed.
        """
        directory = self.layout.agent_dir(agent_id)
        directory.mkdir(parents=True)
        marker = directory / _CREATING
        try:
            marker.touch()
            yield directory
            marker.unlink()
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def _missing(self, directory: Path) -> AgentRecordMissing | None:
        """The refusal for a directory that holds an agent's data but no record, if so.

        The caller found no record; the mark is looked for after that, and a creation
        saves the record before it removes the mark. So a record found now is a creation
        that ended in between (two requests racing for the default agent), not a loss."""
        if (directory / _CREATING).exists() or AgentFiles(directory).record.exists():
            return None
        conversations = _conversations_with_messages(directory)
        has_memory = (AgentFiles(directory).memory / ".git").exists()
        if not conversations and not has_memory:
            return None
        parts = ["a memory repo"] if has_memory else []
        parts += [f"{len(conversations)} conversation(s)"] if conversations else []
        holds = " and ".join(parts)
        record = AgentFiles(directory).record
        text = (
            f"agent directory {directory} holds {holds} but no {record.name} (deleted?); "
            f"agentd will not start a new agent in its place. Restore {record.name} from a "
            "backup"
        )
        rebuilt = _rebuilt_record(directory, conversations)
        if rebuilt is not None:
            candidate = _rebuilt_path(directory)
            text += (
                f", or adopt the record rebuilt from what the directory holds (name "
                f"{rebuilt.name!r}, default conversation {rebuilt.default_conversation_id}; "
                "model, prompt and settings at their defaults: edit it first if yours "
                f"differed): mv {shlex.quote(str(candidate))} {shlex.quote(str(record))}"
            )
        return AgentRecordMissing(directory, text)


def _rebuilt_path(directory: Path) -> Path:
    """Where a record rebuilt from the directory's data waits for the user to adopt it."""
    record = AgentFiles(directory).record
    return record.with_name(record.name + _REBUILT_SUFFIX)


def _conversations_with_messages(directory: Path) -> list[Path]:
    """The conversation logs that hold something, most recently written first."""
    logs = [
        path
        for child in AgentFiles(directory).conversations.glob("*")
        if (path := ConversationFiles(child).messages).is_file() and path.stat().st_size > 0
    ]
    return sorted(logs, key=lambda path: path.stat().st_mtime, reverse=True)


def _rebuilt_record(directory: Path, conversations: list[Path]) -> AgentRecord | None:
    """The record rebuilt from ``directory``, written beside it once; None if it cannot be."""
    candidate = _rebuilt_path(directory)
    try:
        existing = read_model(candidate, AgentRecord)
    except CorruptStateFile:
        existing = None
    if existing is not None:
        return existing
    record = AgentRecord(
        id=directory.name,
        name=_name_in_memory_config(AgentFiles(directory).memory) or directory.name,
        system_prompt=BASE_SYSTEM_PROMPT,
        default_conversation_id=conversations[0].parent.name if conversations else None,
    )
    try:
        write_model_atomic(candidate, record)
    except (OSError, StoreError) as exc:
        log.warning("agent_record_not_rebuilt", path=str(candidate), error=str(exc))
        return None
    log.info("agent_record_rebuilt", path=str(candidate), name=record.name)
    return record


def _name_in_memory_config(memory: Path) -> str | None:
    """The agent name its memory repo was created with (``user.name`` of the repo).

    Read by GitPython's config parser, in Python: no git process runs in a repo whose
    config a model may have written. Imported here, for this rare repair: it costs every
    process that reads the store 30 ms."""
    config = memory / ".git" / "config"
    if not config.is_file():
        return None
    from git.config import GitConfigParser

    try:
        with GitConfigParser(str(config), read_only=True) as parser:
            name = parser.get_value("user", "name", "")
    except (OSError, ValueError, configparser.Error):
        return None
    return str(name).strip() or None
