"""The home is private: directories 0700, files 0600, nothing for group or others.

Memory files, transcripts, git objects, logs and ``agentd.toml`` (with its API key) are
one user's. Every agentd process sets umask 077 before it creates a file
(:func:`private_umask`), so what it creates is private whatever the login shell's umask,
including what git, Valkey and a tool's shell create on its behalf. :func:`secure_home`
closes the front door at start-up: the home directory itself and ``agentd.toml``, which
the user may have made under a looser umask. What older versions (or hands) left open
further in is found by :func:`find_loose` and repaired by :func:`repair` (``agentd doctor
[--fix]``), which never follows a symbolic link and leaves alone a file that has a hard
link outside the home (changing its mode would change the file out there too).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from shared.store.layout import Layout

log = structlog.get_logger(__name__)

PRIVATE_UMASK = 0o077
_OTHERS = 0o077
"""The group and other permission bits: none may be set under the home."""


def private_umask() -> None:
    """From now on this process (and every child it starts) creates private files."""
    os.umask(PRIVATE_UMASK)


@dataclass(frozen=True)
class Loose:
    """A path under the home that group or others may use."""

    path: Path
    mode: int
    linked_outside: bool = False
    """A file with more hard links than the home holds: left as it is."""
    inode: tuple[int, int] | None = field(default=None, compare=False)
    """(device, inode) as scanned: a name swapped for another file before the repair
    reaches it is left alone."""

    def describe(self, home: Path) -> str:
        """``agents/a/memory/system/human.md (0644)``: the path under ``home``."""
        relative = os.path.relpath(self.path, os.path.realpath(home))
        return f"{home if relative == '.' else relative} ({self.mode:04o})"


@dataclass
class Repair:
    fixed: int = 0
    left: list[tuple[Loose, str]] = field(default_factory=list)
    """What could not be made private, with why."""


def secure_home(home: Path) -> None:
    """Create the home private, or make an existing one and its ``agentd.toml`` private.

    Only what this user owns is changed, never a sticky directory (a shared one such as
    /tmp) nor a settings file that is a symbolic link (a home that is one is followed:
    it is where the user keeps agentd's data); each change is logged with the mode it
    replaced.
    """
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (home, Layout(home).config_file):
        try:
            info = os.stat(path, follow_symlinks=path == home)
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        shared_dir = stat.S_ISDIR(info.st_mode) and mode & stat.S_ISVTX
        if not mode & _OTHERS or stat.S_ISLNK(info.st_mode) or shared_dir:
            continue
        if info.st_uid != os.geteuid():
            log.warning("home_not_private", path=str(path), mode=f"{mode:04o}", owner=info.st_uid)
            continue
        os.chmod(path, mode & ~_OTHERS)
        log.warning("home_made_private", path=str(path), mode_was=f"{mode:04o}")


def find_loose(home: Path) -> list[Loose]:
    """Every directory, file, socket … under ``home`` (itself included) that group or
    others may use; symbolic links are not followed and have no mode of their own."""
    return [loose for loose, _fd, _name in _walk_loose(home)]


def repair(home: Path) -> Repair:
    """``chmod go-rwx`` on each :func:`find_loose` path, without following a link."""
    result = Repair()
    for loose, dir_fd, name in _walk_loose(home):
        if loose.linked_outside:
            result.left.append((loose, "it has a hard link outside the home"))
            continue
        if name is None and loose.mode & stat.S_ISVTX:
            result.left.append((loose, "a shared directory (sticky bit): not agentd's to close"))
            continue
        try:
            _chmod_here(dir_fd, name, loose)
        except OSError as exc:
            result.left.append((loose, exc.strerror or str(exc)))
            continue
        result.fixed += 1
    return result


def _walk_loose(home: Path) -> Iterator[tuple[Loose, int, str | None]]:
    """Loose entries with the open directory they are in and their name there (None for
    a directory, which is reached through its own descriptor)."""
    top = Path(os.path.realpath(home))
    if not top.is_dir():
        return
    links_inside = _hard_links_inside(top)
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(top, follow_symlinks=False):
        own = stat.S_IMODE(os.fstat(dir_fd).st_mode)
        if own & _OTHERS:
            yield Loose(Path(dirpath), own), dir_fd, None
        for name, info in _entries(dir_fd, [*filenames, *dirnames]):
            mode = stat.S_IMODE(info.st_mode)
            if mode & _OTHERS:
                inode = (info.st_dev, info.st_ino)
                outside = info.st_nlink > 1 and links_inside[inode] < info.st_nlink
                loose = Loose(Path(dirpath, name), mode, linked_outside=outside, inode=inode)
                yield loose, dir_fd, name


def _entries(dir_fd: int, names: list[str]) -> Iterator[tuple[str, os.stat_result]]:
    """The entries of a directory that are neither directories (each is walked into) nor
    symbolic links (a link has no mode of its own), with their ``lstat``."""
    for name in names:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            yield name, info


def _hard_links_inside(top: Path) -> Counter[tuple[int, int]]:
    """How many names under ``top`` each multiply-linked file has: fewer than its
    ``st_nlink`` means a name elsewhere."""
    seen: Counter[tuple[int, int]] = Counter()
    for _dirpath, dirnames, filenames, dir_fd in os.fwalk(top, follow_symlinks=False):
        for _name, info in _entries(dir_fd, [*filenames, *dirnames]):
            if info.st_nlink > 1:
                seen[(info.st_dev, info.st_ino)] += 1
    return seen


def _chmod_here(dir_fd: int, name: str | None, loose: Loose) -> None:
    """Drop the group and other bits of ``name`` in ``dir_fd`` (of the directory itself
    when ``name`` is None), on the very file that was scanned and never through a link:
    the name is opened ``O_PATH | O_NOFOLLOW`` and the mode set through that descriptor."""
    private = loose.mode & ~_OTHERS
    if name is None:
        os.fchmod(dir_fd, private)
        return
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if stat.S_ISLNK(now.st_mode) or (now.st_dev, now.st_ino) != loose.inode:
            raise OSError(0, "it was replaced while the home was scanned")
        os.chmod(f"/proc/self/fd/{fd}", private)
    finally:
        os.close(fd)
