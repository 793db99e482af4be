"""Export an agent to a ``.tar.gz`` and import one back, under a new id or its own.

The archive holds the agent's record, its memory repo as a git bundle of ``main`` (every
commit, with its sha), and every conversation's transcript with the state that goes with
it (context window, reflection watermark), under the names they have in an agent's
directory, plus a manifest. It travels over the socket (base64 events out, uploaded
pieces in), so it works whatever the daemon can see of the user's files (a systemd unit
with ``PrivateTmp``/``ProtectHome``).

An import is checked as it is read, member by member, before it touches the home
(:mod:`agentd.archive.members`, :mod:`agentd.archive.build`): every member is a regular
file (or directory) with one of the expected names and within its limit, every log line
is a message of its conversation, the records are ones agentd writes, the bundle
verifies and its memory keeps the content rules. The agent is built in a directory under
``$AGENTD_HOME/staging/`` and renamed into ``agents/`` in one step, so a failed import
leaves nothing behind and a half-built agent is never seen. Under a new id (the default)
the records and messages are rewritten to it; the memory history is kept as it is. The
import runs in a thread of its own at background priority: the daemon's event loop
answers everyone else meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import os
import shutil
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import structlog

from agentd import __version__
from agentd.archive.build import BRANCH_REF, Imported, prepare_import
from agentd.archive.format import (
    ARCHIVE_FORMAT,
    CONVERSATION_FILE_LIMITS,
    MESSAGES,
    Manifest,
    new_staging,
    sweep_staging,
)
from agentd.daemon.agents import Agents
from agentd.daemon.replies import Exported
from shared.clock import Clock
from shared.errors import MalformedRequest, NameTaken, PayloadTooLarge
from shared.ids import new_id
from shared.memory import git
from shared.memory.content import MemoryLimits
from shared.models.agents import AgentRecord
from shared.models.events import ArchivePiece, Emit
from shared.priority import lower_this_thread
from shared.protocol import ARCHIVE_CHUNK_BYTES, MAX_ARCHIVE_BYTES
from shared.store.atomic import write_model_atomic
from shared.store.conversations import scan_conversations
from shared.store.jsonl import is_whole_line
from shared.store.layout import AgentFiles, ArchiveFiles, ConversationFiles, Layout

log = structlog.get_logger(__name__)

T = TypeVar("T")


async def export(agents: Agents, record: AgentRecord, emit: Emit) -> Exported:
    """Build the agent's archive and send it as ``archive`` events
    (:class:`~shared.models.events.ArchivePiece`); the final answer carries its size and
    sha256 for agentctl to check what it wrote."""
    archive = await asyncio.to_thread(build_export, agents.layout, record, agents.clock)
    sha, size = hashlib.sha256(), 0
    try:
        with open(archive, "rb") as handle:
            while chunk := await asyncio.to_thread(handle.read, ARCHIVE_CHUNK_BYTES):
                sha.update(chunk)
                size += len(chunk)
                await emit(ArchivePiece(data=base64.b64encode(chunk).decode("ascii")))
    finally:
        await asyncio.to_thread(shutil.rmtree, archive.parent, True)
    return Exported(agent_id=record.id, name=record.name, bytes=size, sha256=sha.hexdigest())


async def import_agent(
    agents: Agents, upload_id: str, *, keep_id: bool, name: str | None, limits: MemoryLimits
) -> Imported:
    """Import the uploaded archive: checked and built under ``staging/``, then renamed
    into ``agents/`` under the lock agent creation takes (its name and id re-checked)."""
    work: Path | None = None
    try:
        built, imported = await _in_background(
            lambda: prepare_import(
                agents.layout,
                upload_id,
                keep_id=keep_id,
                name=name,
                limits=limits,
                name_free=agents.store.ensure_name_free,
            )
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


async def _in_background(work: Callable[[], T]) -> T:
    """``work``'s result, computed in a thread of its own at background priority (its
    git processes too), so the event loop wins the CPU while an import parses."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        lower_this_thread()
        try:
            outcome: tuple[T | None, BaseException | None] = (work(), None)
        except BaseException as exc:  # handed to the awaiting task
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_settle, done, *outcome)

    threading.Thread(target=run, name="agentd-import", daemon=True).start()
    return await done


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():  # the awaiting task was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]  # None only with an error


# --- export --------------------------------------------------------------------------------


def build_export(layout: Layout, record: AgentRecord, clock: Clock) -> Path:
    """Write the agent's archive under ``staging/`` and return its path; the caller removes
    its directory. Blocking (git, file copies)."""
    sweep_staging(layout)
    work = new_staging(layout, "export")
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
    git.run(files.memory, "bundle", "create", "--quiet", str(bundle), BRANCH_REF)
    head = git.run(files.memory, "rev-parse", "--verify", BRANCH_REF).stdout.strip()
    write_model_atomic(AgentFiles(content).record, record)
    conversations = scan_conversations(layout, record.id).ids
    for conversation_id in conversations:
        source = ConversationFiles(layout.conversation_dir(record.id, conversation_id))
        target = ConversationFiles(AgentFiles(content).conversations / conversation_id)
        target.directory.mkdir(parents=True)
        for name in CONVERSATION_FILE_LIMITS:
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
    if source.name == MESSAGES:
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
