"""An uploaded archive read member by member, in one pass over its gzip stream.

Each member is checked from its header before any of its data is read: a name an export
writes, of the type it writes it as, not seen before, within its own limit and within
what is left of the total (:mod:`agentd.archive.format`). Its data is then read as a
stream, so nothing of the archive is ever held in memory whole, and the first member
that breaks a rule ends the import there, with the rest never unpacked. The headers
tar reads into memory itself (long names, pax records) are bounded too.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agentd.archive.format import MAX_MEMBERS, MAX_UNPACKED_BYTES, MemberName, member_name
from shared.errors import InvalidArchive
from shared.store.writes import raise_if_disk_full

CHUNK_BYTES = 1024**2
MAX_HEADER_RECORD_BYTES = 64 * 1024
"""Largest long name or pax record tar may read into memory (an export writes none)."""
_HEADER_RECORDS = frozenset(
    {tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE}
)
_NOTHING = "nothing was imported"


@dataclass
class Member:
    name: MemberName
    size: int
    data: IO[bytes] | None
    """The member's bytes as a stream (None for a directory); read it before the next."""

    def copy_to(self, path: Path) -> None:
        """Write the member to a new file at ``path``, a piece at a time."""
        assert self.data is not None
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                while chunk := self.data.read(CHUNK_BYTES):
                    out.write(chunk)
        except OSError as exc:
            raise_if_disk_full(exc, path, self.size)
            raise


@contextlib.contextmanager
def reading(archive: Path) -> Iterator[Iterator[Member]]:
    """The archive's members, in order; a stream that is not a readable ``.tar.gz``, at
    any point of the body, is :class:`InvalidArchive`."""
    try:
        with tarfile.open(archive, "r|gz", tarinfo=_BoundedTarInfo) as tar:
            yield _members(tar)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InvalidArchive(f"not a readable .tar.gz archive ({exc}); {_NOTHING}") from None


def _members(tar: tarfile.TarFile) -> Iterator[Member]:
    seen: set[str] = set()
    total = 0
    for count, info in enumerate(tar, start=1):
        if count > MAX_MEMBERS:
            raise InvalidArchive(f"more than {MAX_MEMBERS:,} members; {_NOTHING}")
        name = _checked_name(info)
        if name.path in seen:
            raise InvalidArchive(f"member {name.path!r} appears twice; {_NOTHING}")
        seen.add(name.path)
        if info.size > name.limit and name.file is not None:
            raise InvalidArchive(
                f"member {name.path!r} unpacks to {info.size:,} bytes; an export's "
                f"{name.file} holds at most {name.limit:,}; {_NOTHING}"
            )
        total += info.size
        if total > MAX_UNPACKED_BYTES:
            raise InvalidArchive(
                f"the members unpack to more than {MAX_UNPACKED_BYTES:,} bytes; {_NOTHING}"
            )
        yield Member(name, info.size, tar.extractfile(info) if info.isreg() else None)


def _checked_name(info: tarfile.TarInfo) -> MemberName:
    """The member's place if it is one an export writes, of the type it writes it as."""
    name = member_name(info.name)
    if name is None:
        raise InvalidArchive(
            f"member {info.name!r} is not part of an agentd export (only the agent's record, "
            f"memory bundle, manifest and conversation files are); {_NOTHING}"
        )
    is_file = name.file is not None
    if (info.isreg() and is_file) or (info.isdir() and not is_file):
        return name
    expected = "a regular file" if is_file else "a directory"
    raise InvalidArchive(
        f"member {info.name!r} is not {expected} (links and devices are never part of an "
        f"agentd export); {_NOTHING}"
    )


class _BoundedTarInfo(tarfile.TarInfo):
    """A header that refuses a long-name or pax record too large to read into memory,
    which tar would otherwise read whole, whatever its size."""

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_RECORDS and self.size > MAX_HEADER_RECORD_BYTES:
            raise InvalidArchive(
                f"a {self.size:,}-byte tar header record (an export writes none over "
                f"{MAX_HEADER_RECORD_BYTES:,}); {_NOTHING}"
            )
        # tarfile's hook for every header it reads: private, so typeshed does not list it
        return super()._proc_member(tarfile)  # type: ignore[misc]
