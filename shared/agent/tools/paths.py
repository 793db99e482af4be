"""The path guard every file tool goes through, and the only way they open files.

The model names paths freely (relative, ``~``, ``..``, symlinks), so each path is resolved
to its real location *before* it is checked: a check on the spelled path could be walked
around with ``../`` or a symlink. Reads and writes alike stay inside the agent's own
workspace and memory checkout (outside them are other agents, the daemon's config with
its keys, the host's secrets), and writes never go into the memory repo's ``.git``, which
only the harness's git may change.

A check on a path and the open that follows are two moments, and bash (running at the
same time, or earlier) can use the gap: swap a checked directory or file for a symlink to
elsewhere, or hard-link a file from elsewhere into the workspace, where its real path
looks innocent. So files are opened by walking down from the workspace or memory
directory one component at a time with ``O_NOFOLLOW`` (a symlink put in on the way is
refused, never followed), and a file with more than one hard link is not read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from shared.agent.tools.base import ToolContext
from shared.errors import ToolError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""``O_NONBLOCK``: opening a FIFO bash left behind must not wait for a writer forever."""
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)
"""What ``O_NOFOLLOW``/``O_DIRECTORY`` say when a component became a symlink or a file."""


def resolve_for_read(path: str, ctx: ToolContext) -> Path:
    """The real path to read, or ``ToolError`` unless it is in the workspace or memory."""
    real = _resolve(path, ctx)
    if real is None or _root_of(real, ctx) is None:
        raise ToolError(
            f"read refused: {path} is outside your directories; the file tools reach only "
            f"your workspace {_shown(ctx.workspace, ctx)} and memory {_shown(ctx.memory_dir, ctx)}"
        )
    return real


def resolve_for_write(path: str, ctx: ToolContext) -> Path:
    """The real path to write, or ``ToolError`` unless it is in the workspace or memory."""
    real = _resolve(path, ctx)
    allowed = (
        f"writes are allowed only in your workspace {_shown(ctx.workspace, ctx)} "
        f"and memory {_shown(ctx.memory_dir, ctx)} (outside its .git)"
    )
    if real is not None and real.is_relative_to(_real(ctx.memory_dir) / ".git"):
        raise ToolError(f"write refused: {path} is inside the memory repo's .git; {allowed}")
    if real is None or _root_of(real, ctx) is None:
        raise ToolError(f"write refused: {path} is outside your directories; {allowed}")
    return real


def shown(real: Path, ctx: ToolContext) -> str:
    """``real`` (from :func:`resolve_for_read` or :func:`resolve_for_write`) by the name the
    model knows it by: ``/memory/notes.md`` in bubblewrap, the host path where bash runs
    bare. Every message of the file tools names files this way."""
    return ctx.names().inside(real)


def memory_relative(path: Path, ctx: ToolContext) -> str | None:
    """``path`` relative to the memory repo (posix), or ``None`` if it is not in memory."""
    real, memory = _real(path), _real(ctx.memory_dir)
    if not real.is_relative_to(memory):
        return None
    return real.relative_to(memory).as_posix()


def read_checked(real: Path, ctx: ToolContext, *, max_bytes: int) -> bytes:
    """The bytes of ``real`` (from :func:`resolve_for_read`), opened without following any
    symlink; refused if it is not a regular file, has another hard link, or is larger
    than ``max_bytes``."""
    name = shown(real, ctx)
    with open_parent(real, ctx, create=False) as parent:
        try:
            fd = os.open(real.name, _READ_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise ToolError(f"file not found: {name}") from None
        except OSError as e:
            raise _open_error(name, e) from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{name} is a directory, not a file; list it with bash `ls`")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{name} is not a regular file (a FIFO, socket or device)")
        if info.st_nlink > 1:
            raise ToolError(
                f"read refused: {name} has {info.st_nlink} hard links, so its content may "
                "belong to a file outside your directories; copy it with bash to read it"
            )
        if info.st_size > max_bytes:
            raise ToolError(
                f"{name} is {info.st_size} bytes, over the {max_bytes // (1024 * 1024)} MiB "
                "limit; use bash (head, sed -n, grep) to look at parts of it"
            )
        try:
            return file.read(max_bytes)
        except OSError as e:
            raise ToolError(f"cannot read {name}: {e.strerror or e}") from None


@contextlib.contextmanager
def open_parent(real: Path, ctx: ToolContext, *, create: bool) -> Iterator[int]:
    """A descriptor of ``real``'s directory, reached from the workspace or memory root one
    component at a time without following symlinks; ``create`` makes missing ones."""
    root = _root_of(real, ctx)
    assert root is not None, "resolve the path with resolve_for_read or resolve_for_write"
    target = shown(real, ctx)
    if real == root:
        raise ToolError(f"{target} is a directory, not a file; list it with bash `ls`")
    fd = _open_dir(root, None, target, create=False)
    try:
        for name in real.parent.relative_to(root).parts:
            inner = _open_dir(Path(name), fd, target, create=create)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _open_dir(name: Path, dir_fd: int | None, target: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise ToolError(f"file not found: {target}") from None
    except OSError as e:
        raise _open_error(target, e) from None
    try:
        os.mkdir(name, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileExistsError:
        return _open_dir(name, dir_fd, target, create=False)
    except OSError as e:
        raise ToolError(f"cannot create the directories of {target}: {e.strerror or e}") from None


def _open_error(target: str, e: OSError) -> ToolError:
    if e.errno in _LINK_ERRNOS:
        return ToolError(
            f"refused: a part of {target} is (now) a symlink or not a directory; the file "
            "tools do not follow links that were swapped in after the path was checked"
        )
    return ToolError(f"cannot open {target}: {e.strerror or e}")


def _resolve(path: str, ctx: ToolContext) -> Path | None:
    """The real host path of what the model spelled; None for a name outside its places."""
    if not path:
        raise ToolError("path is empty")
    if "\0" in path:
        raise ToolError("path contains a NUL byte")
    host = ctx.names().host(path, ctx.workspace)
    return None if host is None else _real(host)


def _shown(directory: Path, ctx: ToolContext) -> str:
    return shown(_real(directory), ctx)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _root_of(real: Path, ctx: ToolContext) -> Path | None:
    """The real workspace or memory dir ``real`` lies in (the deeper one if both)."""
    roots = (_real(ctx.workspace), _real(ctx.memory_dir))
    inside = [root for root in roots if real.is_relative_to(root)]
    return max(inside, key=lambda root: len(root.parts), default=None)
