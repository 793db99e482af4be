"""read_file, write_file and edit_file: the model's precise way to look at and change files.

Bash could do all of this, but these tools give the model line numbers to cite, exact
replacements that fail loudly instead of silently mangling a file, atomic writes, and a
commit per change when the file is in the agent's memory repo. A write memory may not
hold (into a nested ``.git``, past the per-file or whole-memory size limit) is refused
before anything is written, with the typed error naming the file and the limit
(:mod:`shared.memory.content`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from pydantic import Field

from shared.agent.tools.args import NonEmptyStr, ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.agent.tools.paths import (
    memory_relative,
    open_parent,
    read_checked,
    resolve_for_read,
    resolve_for_write,
    shown,
)
from shared.errors import LockTimeout, MemoryContentError, MemoryRepoError, ToolError
from shared.memory import content
from shared.memory.content import Violation

MAX_READ_BYTES = 10 * 1024 * 1024
DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
"""Longer lines (minified code, data dumps) are cut so one line cannot flood the context."""
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ReadFile(Tool):
    name = "read_file"
    description = "Read a text file (numbered lines; offset/limit in lines)."

    class Args(ToolArgs):
        path: NonEmptyStr
        offset: int = Field(1, ge=1)
        limit: int = Field(DEFAULT_READ_LINES, ge=1)

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        path = resolve_for_read(args.path, ctx)
        return _numbered(shown(path, ctx), _read_text(path, ctx), args.offset, args.limit)


class WriteFile(Tool):
    name = "write_file"
    description = "Create or overwrite a file."

    class Args(ToolArgs):
        path: NonEmptyStr
        content: str

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        path = resolve_for_write(args.path, ctx)
        verb = "update" if path.exists() else "create"
        async with _memory_scope(path, ctx, f"write_file: {verb}"):
            _fits_memory(path, args.content, ctx)
            _atomic_write(path, args.content, ctx)
        return f"wrote {len(args.content)} chars to {shown(path, ctx)}"


class EditFile(Tool):
    name = "edit_file"
    description = "Replace an exact, unique old_string (or all with replace_all)."

    class Args(ToolArgs):
        path: NonEmptyStr
        old_string: NonEmptyStr
        new_string: str
        replace_all: bool = False

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        path = resolve_for_write(args.path, ctx)
        old, new = args.old_string, args.new_string
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        async with _memory_scope(path, ctx, "edit_file: update"):
            text = _read_text(path, ctx)
            count = _count_matches(shown(path, ctx), text, old, args.replace_all)
            edited = text.replace(old, new, -1 if args.replace_all else 1)
            _fits_memory(path, edited, ctx)
            _atomic_write(path, edited, ctx)
        return f"edited {shown(path, ctx)}: {count} replacement{'s' if count > 1 else ''}"


def _count_matches(path: str, text: str, old: str, replace_all: bool) -> int:
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string not found in {path}; copy it exactly from read_file output "
            "(without the line-number prefix), including whitespace"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {path}; add surrounding context to make it "
            "unique, or set replace_all to replace every occurrence"
        )
    return count


@contextlib.asynccontextmanager
async def _memory_scope(path: Path, ctx: ToolContext, action: str) -> AsyncIterator[None]:
    """``ctx.memory_edit`` around a change to a file in memory, else nothing.

    The read and the write both happen under the memory lock, and the change is committed
    before it is released. A busy memory or a failed commit is the model's to handle.
    """
    rel = memory_relative(path, ctx)
    if rel is None:
        yield
        return
    entered = False
    name = shown(path, ctx)
    try:
        async with ctx.memory_edit(f"{action} {rel}"):
            entered = True
            yield
    except MemoryContentError as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from None
    except (LockTimeout, MemoryRepoError) as exc:
        if not entered:
            raise ToolError(f"{name} was not changed: {exc.message}") from None
        raise ToolError(f"{name} was changed but not committed: {exc.message}") from None


def _fits_memory(path: Path, text: str, ctx: ToolContext) -> None:
    """Refuse, before writing, a memory file memory may not hold: one inside a nested
    ``.git``, or one that grows past the per-file limit, or memory past its whole limit
    (a file already over a limit may still be made smaller). Read under the memory lock,
    so the sizes are what the commit will see."""
    rel = memory_relative(path, ctx)
    if rel is None:
        return
    parts = PurePosixPath(rel).parts
    nested = next((i for i, part in enumerate(parts) if content.is_git_name(part)), None)
    refused: Violation | None = None
    if nested is not None:
        refused = Violation("nested_repository", "/".join(parts[: nested + 1]))
    else:
        limits = ctx.memory_limits
        size = len(text.encode("utf-8"))
        sizes = content.read_checkout(ctx.memory_dir).sizes
        before = sizes.get(rel, 0)
        total = sum(sizes.values()) - before + size
        if size > limits.file_bytes and size > before:
            refused = Violation("file_too_large", rel, size, limits.file_bytes)
        elif total > limits.total_bytes and size > before:
            refused = Violation("memory_too_large", "", total, limits.total_bytes)
    if refused is not None:
        error = content.error_for(refused, "Nothing was written")
        raise ToolError(f"{error.code}: {error.message}")


def _read_text(path: Path, ctx: ToolContext) -> str:
    data = read_checked(path, ctx, max_bytes=MAX_READ_BYTES)
    name = shown(path, ctx)
    if b"\0" in data:
        raise ToolError(f"{name} looks binary (contains NUL bytes); inspect it with bash")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{name} is not UTF-8 (byte {e.start}); inspect it with bash") from None


def _numbered(path: str, text: str, offset: int, limit: int) -> str:
    if not text:
        return f"{path} is empty"
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if offset > len(lines):
        raise ToolError(f"offset {offset} is past the end of {path} ({len(lines)} lines)")
    shown = lines[offset - 1 : offset - 1 + limit]
    out = "\n".join(f"{n:6d}\t{_cut(line)}" for n, line in enumerate(shown, start=offset))
    last = offset + len(shown) - 1
    if last < len(lines):
        out += f"\n[lines {offset}-{last} of {len(lines)}; use offset={last + 1} to read on]"
    return out


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}... [line cut, {len(line) - MAX_LINE_CHARS} more chars]"


def _atomic_write(path: Path, content: str, ctx: ToolContext) -> None:
    """Write via a temp file in the same directory and ``os.replace``: all or nothing.

    The directory is reached without following symlinks (:func:`open_parent`), so a link
    swapped in after the path was checked cannot send the write elsewhere; a symlink at
    ``path`` itself is replaced, not written through.
    """
    name = shown(path, ctx)
    with open_parent(path, ctx, create=True) as parent:
        try:
            info: os.stat_result | None = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        except OSError as e:
            raise ToolError(f"cannot write {name}: {e.strerror or e}") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{name} is a directory")
        keep_mode = info is not None and stat.S_ISREG(info.st_mode)
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            # 0o666 lets the umask pick a new file's mode, as a plain open() would.
            fd = os.open(tmp, _NEW_FILE_FLAGS, 0o666, dir_fd=parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                    f.write(content)
                    f.flush()
                    if keep_mode:
                        assert info is not None
                        os.fchmod(f.fileno(), stat.S_IMODE(info.st_mode))
                    os.fsync(f.fileno())
                os.replace(tmp, path.name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=parent)
                raise
        except OSError as e:
            raise ToolError(f"cannot write {name}: {e.strerror or e}") from None
