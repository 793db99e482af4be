"""Export an agent to a ``.tar.gz`` and import one back, under a new id or its own.

The archive holds the agent's record, its memory repo as a git bundle of ``main`` (every
commit, with its sha), and every conversation's transcript with the state that goes with
it (context window, reflection watermark), under the names they have in an agent's
directory, plus a manifest. It travels over the socket (base64 events out, uploaded
pieces in), so it works whatever the daemon can see of the user's files (a systemd unit
with ``PrivateTmp``/``ProtectHome``).

An import is checked whole before it touches the home: every member is a regular file
(or directory) with one of the expected names, the sizes add up to less than the limits,
the records parse, and the bundle verifies. The agent is then built in a directory under
``$AGENTD_HOME/staging/`` and renamed into ``agents/`` in one step, so a failed import
leaves nothing behind and a half-built agent is never seen. Under a new id (the default)
the records and messages are rewritten to it; the memory history is kept as it is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gzip
import hashlib
import os
import shutil
import tarfile
import time
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError

from agentd import __version__
from agentd.agents import Agents
from shared.agent.loop import Emit
from shared.clock import Clock
from shared.errors import (
    AgentExists,
    CorruptStateFile,
    InvalidArchive,
    MalformedRequest,
    MemoryRepoError,
    NameTaken,
    PayloadTooLarge,
)
from shared.ids import ID_PATTERN, new_id
from shared.memory import git
from shared.memory.git import first_line
from shared.models.agents import AgentRecord, ContextState, ConversationRecord
from shared.models.messages import Message
from shared.protocol import ARCHIVE_CHUNK_BYTES, EVENT_ARCHIVE, MAX_ARCHIVE_BYTES
from shared.store.atomic import read_model, write_model_atomic
from shared.store.conversations import scan_conversations
from shared.store.jsonl import is_whole_line
from shared.store.layout import AgentFiles, ArchiveFiles, ConversationFiles, Layout

log = structlog.get_logger(__name__)

ARCHIVE_FORMAT = 1
MAX_UNPACKED_BYTES = 8 * 1024**3
"""Largest total its members may unpack to: a small archive of zeros does not fill the disk."""
MAX_MEMBERS = 100_000
STALE_STAGING_S = 24 * 3600.0
"""Staging left by an export or import whose process died is removed after a day."""
_BRANCH_REF = "refs/heads/main"

_ROOT = Path("")
_AGENT = AgentFiles(_ROOT)
_ARCHIVE = ArchiveFiles(_ROOT)
_CONVERSATION = ConversationFiles(_ROOT)
_TOP_FILES = frozenset(
    p.as_posix() for p in (_AGENT.record, _ARCHIVE.manifest, _ARCHIVE.memory_bundle)
)
_CONVERSATIONS_DIR = _AGENT.conversations.as_posix()
_CONVERSATION_FILES = {
    _CONVERSATION.record.name: True,
    _CONVERSATION.messages.name: True,
    _CONVERSATION.context.name: False,
    _CONVERSATION.reflection_state.name: False,
}
"""The files of a conversation an archive carries, and whether each must be there."""


class Manifest(BaseModel):
    format: int
    agentd_version: str
    agent_id: str
    name: str
    exported_at: datetime
    memory_head: str
    conversations: list[str]


@dataclass(frozen=True)
class Imported:
    record: AgentRecord
    conversations: int
    memory_head: str


async def export(agents: Agents, record: AgentRecord, emit: Emit) -> dict[str, object]:
    """Build the agent's archive and send it as :data:`EVENT_ARCHIVE` pieces; the final
    answer carries its size and sha256 for agentctl to check what it wrote."""
    archive = await asyncio.to_thread(build_export, agents.layout, record, agents.clock)
    sha, size = hashlib.sha256(), 0
    try:
        with open(archive, "rb") as handle:
            while chunk := await asyncio.to_thread(handle.read, ARCHIVE_CHUNK_BYTES):
                sha.update(chunk)
                size += len(chunk)
                await emit(EVENT_ARCHIVE, {"data": base64.b64encode(chunk).decode("ascii")})
    finally:
        await asyncio.to_thread(shutil.rmtree, archive.parent, True)
    return {"agent_id": record.id, "name": record.name, "bytes": size, "sha256": sha.hexdigest()}


async def import_agent(
    agents: Agents, upload_id: str, *, keep_id: bool, name: str | None
) -> Imported:
    """Import the uploaded archive: checked and built under ``staging/``, then renamed
    into ``agents/`` under the lock agent creation takes (its name and id re-checked)."""
    work: Path | None = None
    try:
        built, imported = await asyncio.to_thread(
            prepare_import, agents.layout, upload_id, keep_id=keep_id, name=name
        )
        work = built.parent
        await agents.adopt(built, imported.record)
    except NameTaken as exc:
        raise NameTaken(
            f"{exc.message}; import it under another name with `agentctl import --name NAME`"
        ) from None
    finally:
        if work is not None:
            await asyncio.to_thread(shutil.rmtree, work, True)
    log.info(
        "agent_imported",
        agent_id=imported.record.id,
        name=imported.record.name,
        conversations=imported.conversations,
    )
    return imported


# --- export --------------------------------------------------------------------------------


def build_export(layout: Layout, record: AgentRecord, clock: Clock) -> Path:
    """Write the agent's archive under ``staging/`` and return its path; the caller removes
    its directory. Blocking (git, file copies)."""
    sweep_staging(layout)
    work = _new_staging(layout, "export")
    try:
        return _build_export(layout, record, work, clock)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _build_export(layout: Layout, record: AgentRecord, work: Path, clock: Clock) -> Path:
    files = layout.agent_files(record.id)
    content = work / "content"
    content.mkdir()
    bundle = ArchiveFiles(content).memory_bundle
    git.run(files.memory, "bundle", "create", "--quiet", str(bundle), _BRANCH_REF)
    head = git.run(files.memory, "rev-parse", "--verify", _BRANCH_REF).stdout.strip()
    write_model_atomic(AgentFiles(content).record, record)
    conversations = scan_conversations(layout, record.id).ids
    for conversation_id in conversations:
        source = ConversationFiles(layout.conversation_dir(record.id, conversation_id))
        target = ConversationFiles(AgentFiles(content).conversations / conversation_id)
        target.directory.mkdir(parents=True)
        for name in _CONVERSATION_FILES:
            if (source.directory / name).is_file():
                _copy_complete_lines(source.directory / name, target.directory / name)
    manifest = Manifest(
        format=ARCHIVE_FORMAT,
        agentd_version=__version__,
        agent_id=record.id,
        name=record.name,
        exported_at=clock(),
        memory_head=head,
        conversations=conversations,
    )
    write_model_atomic(ArchiveFiles(content).manifest, manifest)
    archive = work / "agent.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(content.rglob("*")):
            tar.add(
                path, arcname=path.relative_to(content).as_posix(), recursive=False, filter=_plain
            )
    log.info("agent_exported", agent_id=record.id, bytes=archive.stat().st_size)
    return archive


def _copy_complete_lines(source: Path, target: Path) -> None:
    """Copy ``source`` as far as its last complete line: a log a turn is appending to is
    cut where the append began, and a whole last line a crash left without its newline
    gets it, as the log's repair would (the state files are replaced whole, never
    appended)."""
    data = source.read_bytes()
    if source.name == _CONVERSATION.messages.name:
        end = data.rfind(b"\n") + 1
        data = data + b"\n" if is_whole_line(data[end:]) else data[:end]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner or group of this machine in the archive."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o700 if info.isdir() else 0o600
    return info


# --- upload --------------------------------------------------------------------------------


def append_upload(layout: Layout, upload_id: str | None, offset: int, data: str) -> tuple[str, int]:
    """Add one piece of an archive agentctl sends; the upload's id and its size so far.

    The first piece (no id) starts a new upload; each next one must start where the last
    ended (``offset``), so a piece sent twice or out of order is refused, not spliced in.
    """
    try:
        piece = base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise MalformedRequest(f"params.data: not base64 ({exc})") from None
    if upload_id is None:
        sweep_staging(layout)
        upload_id = new_id("upload")
        layout.staging_dir.mkdir(mode=0o700, exist_ok=True)
        path = layout.upload_file(upload_id)
        path.touch(mode=0o600, exist_ok=False)
    else:
        path = layout.upload_file(upload_id)
        if not path.is_file():
            raise MalformedRequest(
                f"no upload {upload_id}: it finished, failed or expired; start again"
            )
    size = path.stat().st_size
    if offset != size:
        raise MalformedRequest(
            f"upload {upload_id} holds {size:,} bytes; a piece at {offset:,} does not follow"
        )
    if size + len(piece) > MAX_ARCHIVE_BYTES:
        path.unlink(missing_ok=True)
        raise PayloadTooLarge(
            f"an archive may have up to {MAX_ARCHIVE_BYTES:,} bytes; the upload is dropped"
        )
    with open(path, "ab") as handle:
        handle.write(piece)
    return upload_id, size + len(piece)


# --- import --------------------------------------------------------------------------------


def prepare_import(
    layout: Layout, upload_id: str, *, keep_id: bool, name: str | None
) -> tuple[Path, Imported]:
    """Check the uploaded archive and build the agent from it under ``staging/``: the
    directory to rename into ``agents/`` (and the staging to remove), and what it holds.
    Blocking. Nothing under ``agents/`` is touched."""
    upload = layout.upload_file(upload_id)
    if not upload.is_file():
        raise MalformedRequest(f"no upload {upload_id}: send the archive first")
    work = _new_staging(layout, "import")
    try:
        unpacked = work / "unpacked"
        unpacked.mkdir()
        _unpack(upload, unpacked)
        manifest = _manifest(unpacked)
        record = _record(unpacked, manifest)
        agent_id = manifest.agent_id if keep_id else new_id("agent")
        if keep_id and layout.agent_dir(agent_id).exists():
            raise AgentExists(
                f"an agent with id {agent_id} exists already; delete it first, or import "
                "without --keep-id to give the copy a new id"
            )
        record = record.model_copy(update={"id": agent_id, "name": name or record.name})
        built = work / "agent"
        imported = _build_agent(unpacked, built, manifest, record)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finally:
        upload.unlink(missing_ok=True)
    return built, imported


def _unpack(archive: Path, target: Path) -> None:
    """Extract ``archive`` into ``target`` once every member has passed (see the module)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _checked_members(tar)
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InvalidArchive(
            f"not a readable .tar.gz archive ({exc}); nothing was imported"
        ) from None


def _checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    seen: set[str] = set()
    total = 0
    while (info := tar.next()) is not None:
        if len(members) >= MAX_MEMBERS:
            raise InvalidArchive(f"more than {MAX_MEMBERS:,} members; nothing was imported")
        name = _member_name(info)
        if name in seen:
            raise InvalidArchive(f"member {name!r} appears twice; nothing was imported")
        seen.add(name)
        total += info.size
        if total > MAX_UNPACKED_BYTES:
            raise InvalidArchive(
                f"the members unpack to more than {MAX_UNPACKED_BYTES:,} bytes; "
                "nothing was imported"
            )
        members.append(info)
    return members


def _member_name(info: tarfile.TarInfo) -> str:
    """The member's name if it is one an export writes, of the type it writes it as."""
    name = info.name.removesuffix("/")
    parts = name.split("/")
    refused = InvalidArchive(
        f"member {info.name!r} is not part of an agentd export (only the agent's record, "
        "memory bundle, manifest and conversation files are); nothing was imported"
    )
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise refused
    is_file = len(parts) == 1 and name in _TOP_FILES
    is_dir = parts[0] == _CONVERSATIONS_DIR and len(parts) <= 2
    if len(parts) >= 2 and parts[0] == _CONVERSATIONS_DIR and not ID_PATTERN.fullmatch(parts[1]):
        raise refused
    if len(parts) == 3 and parts[0] == _CONVERSATIONS_DIR:
        is_file = parts[2] in _CONVERSATION_FILES
    if is_file and info.isreg():
        return name
    if is_dir and info.isdir():
        return name
    if is_file or is_dir:
        expected = "a regular file" if is_file else "a directory"
        raise InvalidArchive(
            f"member {info.name!r} is not {expected} (links and devices are never part of "
            "an agentd export); nothing was imported"
        )
    raise refused


def _manifest(unpacked: Path) -> Manifest:
    path = ArchiveFiles(unpacked).manifest
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise InvalidArchive(f"the archive's manifest is missing or unreadable ({exc})") from None
    if manifest.format != ARCHIVE_FORMAT:
        raise InvalidArchive(
            f"archive format {manifest.format} (agentd {manifest.agentd_version}); this "
            f"agentd reads format {ARCHIVE_FORMAT}: upgrade agentd"
        )
    if not ID_PATTERN.fullmatch(manifest.agent_id) or not all(
        ID_PATTERN.fullmatch(c) for c in manifest.conversations
    ):
        raise InvalidArchive("the manifest names an id that is not valid")
    listed = sorted(manifest.conversations)
    present = sorted(p.name for p in AgentFiles(unpacked).conversations.glob("*"))
    if listed != present:
        raise InvalidArchive(
            f"the manifest lists {len(listed)} conversation(s), the archive holds {len(present)}"
        )
    return manifest


def _record(unpacked: Path, manifest: Manifest) -> AgentRecord:
    try:
        record = read_model(AgentFiles(unpacked).record, AgentRecord)
    except CorruptStateFile as exc:
        raise InvalidArchive(f"the agent record is unreadable: {exc.message}") from None
    if record is None or record.id != manifest.agent_id:
        raise InvalidArchive("the archive has no agent record for the agent its manifest names")
    return record


def _build_agent(unpacked: Path, built: Path, manifest: Manifest, record: AgentRecord) -> Imported:
    files = AgentFiles(built)
    built.mkdir(mode=0o700)
    files.workspace.mkdir(mode=0o700)
    files.conversations.mkdir(mode=0o700)
    head = _restore_memory(ArchiveFiles(unpacked).memory_bundle, files.memory, record)
    if head != manifest.memory_head:
        raise InvalidArchive(
            f"the memory bundle's main is {head[:7]}, the manifest says {manifest.memory_head[:7]}"
        )
    for conversation_id in manifest.conversations:
        source = ConversationFiles(AgentFiles(unpacked).conversations / conversation_id)
        target = ConversationFiles(files.conversations / conversation_id)
        target.directory.mkdir(mode=0o700)
        _import_conversation(source, target, record.id, conversation_id)
    if record.default_conversation_id not in (None, *manifest.conversations):
        raise InvalidArchive("the agent's default conversation is not in the archive")
    write_model_atomic(files.record, record)
    return Imported(record, len(manifest.conversations), head)


def _restore_memory(bundle: Path, memory: Path, record: AgentRecord) -> str:
    """A memory repo at ``memory`` whose ``main`` is the bundle's; its HEAD sha."""
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
            f"{_BRANCH_REF}:{_BRANCH_REF}",
        )
        git.run(memory, "reset", "--quiet", "--hard", _BRANCH_REF)
    except MemoryRepoError as exc:
        raise InvalidArchive(f"the memory bundle cannot be restored: {exc.message}") from None
    git.run(memory, "config", "--local", "user.name", record.name)
    git.run(memory, "config", "--local", "user.email", f"{record.id}@agentd.local")
    return git.run(memory, "rev-parse", "--verify", _BRANCH_REF).stdout.strip()


def _import_conversation(
    source: ConversationFiles, target: ConversationFiles, agent_id: str, conversation_id: str
) -> None:
    for name, required in _CONVERSATION_FILES.items():
        if required and not (source.directory / name).is_file():
            raise InvalidArchive(f"conversation {conversation_id} has no {name}")
    try:
        conversation = read_model(source.record, ConversationRecord)
        read_model(source.context, ContextState)
    except CorruptStateFile as exc:
        raise InvalidArchive(f"conversation {conversation_id}: {exc.message}") from None
    if conversation is None or conversation.id != conversation_id:
        raise InvalidArchive(f"conversation {conversation_id}'s record names another one")
    write_model_atomic(target.record, conversation.model_copy(update={"agent_id": agent_id}))
    for name in (source.context.name, source.reflection_state.name):
        if (source.directory / name).is_file():
            shutil.copyfile(source.directory / name, target.directory / name)
    with open(source.messages, "rb") as lines, open(target.messages, "wb") as out:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                message = Message.parse_line(line)
            except ValidationError as exc:
                raise InvalidArchive(
                    f"conversation {conversation_id}, message line {number}: "
                    f"{exc.errors()[0]['msg']}"
                ) from None
            out.write(message.model_copy(update={"agent_id": agent_id}).to_line())
        out.flush()
        os.fsync(out.fileno())


# --- staging -------------------------------------------------------------------------------


def _new_staging(layout: Layout, kind: str) -> Path:
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
