"""An uploaded archive checked and built into an agent under ``staging/``, in one pass.

Members are read as a stream (:mod:`agentd.archive.members`): the small state files are
written to ``staging/<import>/unpacked/`` to be parsed once all are in, the memory bundle
beside them, and each conversation log is checked line by line as it arrives and written
straight into the agent being built, rewritten to its id. The first thing wrong ends the
import there, and nothing under ``agents/`` is touched: the caller renames the built
directory into place (see :func:`agentd.archive.ops.import_agent`).

What is refused, beyond the archive's shape: an agent record ``agent.create`` would not
write (its name above all: a name is printed by ``agents list``, so a terminal escape in
one is an attack), a name another agent has as its name or id, a log line that is blank,
too long, not a message, a message of another conversation or agent, or a message id
seen before anywhere in the archive (recall would then find it twice), and memory that
breaks the content rules (:mod:`shared.memory.content`: no nested repository, files and
memory within their sizes).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from agentd.archive.format import (
    AGENT_RECORD,
    ARCHIVE_FORMAT,
    CONTEXT,
    CONVERSATION_RECORD,
    CONVERSATIONS,
    MANIFEST,
    MAX_LINE_BYTES,
    MEMORY_BUNDLE,
    MESSAGES,
    REFLECTION_STATE,
    Manifest,
    new_staging,
)
from agentd.archive.members import Member, reading
from agentd.daemon.requests import AgentCreate, describe
from shared.errors import (
    AgentExists,
    CorruptStateFile,
    InvalidArchive,
    InvalidId,
    MalformedRequest,
    MemoryContentError,
    MemoryRepoError,
)
from shared.ids import ID_PATTERN, new_id
from shared.memory import content, git
from shared.memory.content import MemoryLimits
from shared.memory.git import first_line
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord, ContextState, ConversationRecord
from shared.models.messages import Message
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import AgentFiles, Layout
from shared.store.writes import raise_if_disk_full

BRANCH_REF = "refs/heads/main"
_NOTHING = "nothing was imported"


@dataclass(frozen=True)
class Imported:
    record: AgentRecord
    conversations: int
    memory_head: str


def prepare_import(
    layout: Layout,
    upload_id: str,
    *,
    keep_id: bool,
    name: str | None,
    limits: MemoryLimits,
    name_free: Callable[[str], None],
) -> tuple[Path, Imported]:
    """Check the uploaded archive and build the agent from it under ``staging/``: the
    directory to rename into ``agents/`` (its parent is the staging to remove), and what
    it holds. ``name_free`` raises if another agent has the name as its name or id.
    Blocking; nothing under ``agents/`` is touched."""
    upload = layout.upload_file(upload_id)
    if not upload.is_file():
        raise MalformedRequest(f"no upload {upload_id}: send the archive first")
    work = new_staging(layout, "import")
    try:
        build = _Build(layout, work, keep_id=keep_id, name=name, name_free=name_free)
        try:
            with reading(upload) as members:
                for member in members:
                    build.add(member)
            imported = build.finish(limits)
        finally:
            build.ids.close()
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        upload.unlink(missing_ok=True)
    return build.agent, imported


class _Build:
    def __init__(
        self,
        layout: Layout,
        work: Path,
        *,
        keep_id: bool,
        name: str | None,
        name_free: Callable[[str], None],
    ) -> None:
        self.layout = layout
        self.unpacked = work / "unpacked"
        self.agent = work / "agent"
        self.files = AgentFiles(self.agent)
        for directory in (
            self.unpacked,
            self.agent,
            self.files.workspace,
            self.files.conversations,
        ):
            directory.mkdir(mode=0o700)
        self.keep_id = keep_id
        self.name = name
        self.name_free = name_free
        self.new_id = None if keep_id else new_id("agent")
        self.ids = _MessageIds(work / "message-ids.sqlite")
        self.record: AgentRecord | None = None
        self.conversations: set[str] = set()
        self.logs: set[str] = set()
        self.named_agents: set[str] = set()
        """The agent ids the archive's messages and conversation records name."""

    def add(self, member: Member) -> None:
        where = member.name
        if where.conversation is not None:
            self.conversations.add(where.conversation)
        if where.file is None:
            return
        if where.conversation is not None and where.file == MESSAGES:
            self._log(member, where.conversation)
            return
        member.copy_to(self.unpacked / where.path)
        if where.path == AGENT_RECORD:
            self.record = self._record()

    def _record(self) -> AgentRecord:
        """The archive's agent record, checked as ``agent.create`` checks what it writes:
        read as soon as it arrives, so a clash is refused before the rest is unpacked."""
        try:
            record = read_model(self.unpacked / AGENT_RECORD, AgentRecord)
        except CorruptStateFile as exc:
            raise InvalidArchive(f"the agent record is unreadable: {exc.message}") from None
        assert record is not None  # just written
        fields = {
            "name": record.name,
            "model": record.model,
            "system_prompt": record.system_prompt,
            "context_window": record.context_window,
        }
        try:
            AgentCreate.model_validate(fields)
            if not ID_PATTERN.fullmatch(record.id):
                raise InvalidId(f"agent id {record.id!r:.80} is not valid")
        except InvalidId as exc:
            raise InvalidArchive(f"the agent record: {exc.message}; {_NOTHING}") from None
        except ValidationError as exc:
            raise InvalidArchive(
                f"the agent record: {describe(exc, prefix='agent')}; {_NOTHING}"
            ) from None
        if self.keep_id and self.layout.agent_dir(record.id).exists():
            raise AgentExists(
                f"an agent with id {record.id} exists already; delete it first, or import "
                "without --keep-id to give the copy a new id"
            )
        self.name_free(self.name or record.name)
        return record

    def _log(self, member: Member, conversation: str) -> None:
        """Check the conversation's log line by line and write it, rewritten to the new
        agent id, into the agent being built."""
        target = self.files.conversations / conversation / MESSAGES
        target.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                for number, line in _lines(member, conversation):
                    message = _message(line, conversation, number)
                    self.ids.add(message.id, conversation, number)
                    self.named_agents.add(message.agent_id)
                    if self.new_id is not None:
                        message = message.model_copy(update={"agent_id": self.new_id})
                    out.write(message.to_line())
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise_if_disk_full(exc, target, member.size)
            raise
        self.logs.add(conversation)

    def finish(self, limits: MemoryLimits) -> Imported:
        """Check what needs the whole archive, then complete the agent being built."""
        manifest = _manifest(self.unpacked / MANIFEST, self.conversations)
        record = self.record
        if record is None or record.id != manifest.agent_id:
            raise InvalidArchive(
                f"the archive has no agent record for the agent its manifest names; {_NOTHING}"
            )
        if record.default_conversation_id not in (None, *manifest.conversations):
            raise InvalidArchive(
                f"the agent's default conversation is not in the archive; {_NOTHING}"
            )
        for conversation in manifest.conversations:
            self._conversation(conversation)
        strangers = self.named_agents - {record.id}
        if strangers:
            raise InvalidArchive(
                f"messages or conversations of the archive name agent {min(strangers)!r:.80}, "
                f"not the agent it holds ({record.id}); {_NOTHING}"
            )
        agent_id = self.new_id or record.id
        record = record.model_copy(update={"id": agent_id, "name": self.name or record.name})
        head = _restore_memory(self.unpacked / MEMORY_BUNDLE, self.files.memory, record, limits)
        if head != manifest.memory_head:
            raise InvalidArchive(
                f"the memory bundle's main is {head[:7]}, the manifest says "
                f"{manifest.memory_head[:7]!r}; {_NOTHING}"
            )
        write_model_atomic(self.files.record, record)
        return Imported(record, len(manifest.conversations), head)

    def _conversation(self, conversation: str) -> None:
        source = self.unpacked / CONVERSATIONS / conversation
        target = self.files.conversations / conversation
        for name, there in (
            (CONVERSATION_RECORD, (source / CONVERSATION_RECORD).is_file()),
            (MESSAGES, conversation in self.logs),
        ):
            if not there:
                raise InvalidArchive(f"conversation {conversation} has no {name}; {_NOTHING}")
        try:
            found = read_model(source / CONVERSATION_RECORD, ConversationRecord)
            read_model(source / CONTEXT, ContextState)
        except CorruptStateFile as exc:
            raise InvalidArchive(f"conversation {conversation}: {exc.message}") from None
        if found is None or found.id != conversation:
            raise InvalidArchive(f"conversation {conversation}'s record names another one")
        self.named_agents.add(found.agent_id)
        target.mkdir(mode=0o700, exist_ok=True)
        rewritten = found.model_copy(update={"agent_id": self.new_id or found.agent_id})
        write_model_atomic(target / CONVERSATION_RECORD, rewritten)
        for name in (CONTEXT, REFLECTION_STATE):
            if (source / name).is_file():
                shutil.copyfile(source / name, target / name)


def _lines(member: Member, conversation: str) -> Iterator[tuple[int, bytes]]:
    """The log's lines, numbered; refused at the first blank, overlong or unterminated
    one (an export's log holds one message a line, each ending with a newline)."""
    assert member.data is not None
    number = 0
    while line := member.data.readline(MAX_LINE_BYTES + 1):
        number += 1
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE_BYTES:
                _refuse_line(conversation, number, f"is over {MAX_LINE_BYTES:,} bytes")
            _refuse_line(conversation, number, "does not end with a newline")
        if not line.strip():
            _refuse_line(conversation, number, "is blank; an export's log has none")
        yield number, line


def _message(line: bytes, conversation: str, number: int) -> Message:
    try:
        message = Message.parse_line(line)
    except ValidationError as exc:
        _refuse_line(conversation, number, f"is not a message ({exc.errors()[0]['msg']})")
    if message.conversation_id != conversation:
        _refuse_line(
            conversation,
            number,
            f"is a message of conversation {message.conversation_id!r:.80}; a "
            "conversation's log holds its own messages only",
        )
    if not ID_PATTERN.fullmatch(message.id):
        _refuse_line(
            conversation, number, f"has a message id that is not valid: {message.id!r:.80}"
        )
    return message


def _refuse_line(conversation: str, number: int, what: str) -> NoReturn:
    raise InvalidArchive(f"conversation {conversation}, message line {number:,} {what}; {_NOTHING}")


class _MessageIds:
    """Every message id of the archive, to refuse one seen twice: kept in SQLite in the
    import's staging, so a history of millions of messages costs disk, not memory."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(
            "CREATE TABLE ids (id TEXT PRIMARY KEY, conversation TEXT NOT NULL, line INTEGER)"
            " WITHOUT ROWID"
        )
        self._db.execute("BEGIN")

    def add(self, message_id: str, conversation: str, line: int) -> None:
        try:
            self._db.execute("INSERT INTO ids VALUES (?, ?, ?)", (message_id, conversation, line))
        except sqlite3.IntegrityError:
            first, at = self._db.execute(
                "SELECT conversation, line FROM ids WHERE id = ?", (message_id,)
            ).fetchone()
            raise InvalidArchive(
                f"message {message_id} appears twice: conversation {first} line {at:,} and "
                f"conversation {conversation} line {line:,}; {_NOTHING}"
            ) from None

    def close(self) -> None:
        self._db.close()


def _manifest(path: Path, present: set[str]) -> Manifest:
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise InvalidArchive(f"the archive's manifest is missing or unreadable ({exc})") from None
    if manifest.format != ARCHIVE_FORMAT:
        raise InvalidArchive(
            f"archive format {manifest.format} (agentd {manifest.agentd_version!r:.40}); this "
            f"agentd reads format {ARCHIVE_FORMAT}: upgrade agentd"
        )
    if not ID_PATTERN.fullmatch(manifest.agent_id) or not all(
        ID_PATTERN.fullmatch(c) for c in manifest.conversations
    ):
        raise InvalidArchive("the manifest names an id that is not valid")
    listed = sorted(manifest.conversations)
    if listed != sorted(present):
        raise InvalidArchive(
            f"the manifest lists {len(listed)} conversation(s), the archive holds {len(present)}"
        )
    return manifest


def _restore_memory(bundle: Path, memory: Path, record: AgentRecord, limits: MemoryLimits) -> str:
    """A memory repo at ``memory`` whose ``main`` is the bundle's, checked against the
    memory content rules before anything is checked out; its HEAD sha."""
    if not bundle.is_file():
        raise InvalidArchive("the archive has no memory bundle")
    memory.mkdir(mode=0o700)
    git.run(memory, "init", "--quiet", "--template=", "--initial-branch=main")
    verified = git.run(memory, "bundle", "verify", "--quiet", str(bundle), check=False)
    if verified.returncode != 0:
        raise InvalidArchive(f"the memory bundle does not verify: {first_line(verified.stderr)}")
    try:
        git.run(
            memory,
            "fetch",
            "--quiet",
            "--no-tags",
            "--update-head-ok",
            str(bundle),
            f"{BRANCH_REF}:{BRANCH_REF}",
        )
        violations = content.scan_tree(memory, BRANCH_REF, limits)
    except MemoryRepoError as exc:
        raise InvalidArchive(f"the memory bundle cannot be restored: {exc.message}") from None
    try:
        content.refuse(violations)
    except MemoryContentError as exc:
        message = f"the archive's memory: {exc.message}; {_NOTHING}"
        raise type(exc)(message, path=exc.path, rule=exc.rule) from None
    git.run(memory, "reset", "--quiet", "--hard", BRANCH_REF)
    MemoryRepo(memory).configure(record.name, f"{record.id}@agentd.local")
    return git.run(memory, "rev-parse", "--verify", BRANCH_REF).stdout.strip()
