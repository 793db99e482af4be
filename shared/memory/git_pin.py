"""What a repository's own ``.git`` may say to the harness's git: its config and attributes,
pinned to what agentd writes.

``-c`` options override settings we can name in advance (hooks, fsmonitor, …), but a
filter, diff or merge driver has a name of the writer's choosing (``filter.x.clean = sh
f.sh``), and git runs it for any path whose attributes name it. Two things shut that door
for good, checked by :func:`shared.memory.git.run_once` before every harness git command
in a repository:

- **The config holds only what agentd writes** (:data:`ALLOWED`: the core settings ``git
  init`` writes, the identity, ``commit.gpgsign`` and ``gc.auto``). Anything else — a
  driver, an ``include``/``includeIf`` (whose target a model could edit at will), a remote
  with an ``uploadpack``, ``core.worktree``, an extension — and the file is rewritten to
  the canonical form, keeping the identity. Whether an entry is there is asked of git's
  own parser (``git config --file … --no-includes --list``), so no quoting or
  continuation trick can hide a key from the check that git would still read.
- **Every path's attributes unset the command-running ones**: ``$GIT_DIR/info/attributes``
  has the highest precedence of all attribute files, above any ``.gitattributes`` in the
  tree (checked on git 2.39: ``* !filter`` there beats ``* filter=x``, a macro and a
  more specific pattern in a subdirectory's ``.gitattributes``), so :data:`ATTRIBUTES`
  there leaves no driver a path could name, and no content conversion either. Git 2.42's
  ``--attr-source`` would only stop the in-tree files from being read; this file is
  needed either way, so agentd does not depend on the newer git.

This module holds the rules and writes the files; it never runs git (the helper does).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

ATTRIBUTES = b"* !filter !diff !merge !text !eol !ident !working-tree-encoding\n"
"""The content of ``info/attributes``: for every path, no filter (clean, smudge,
process), no diff driver (textconv, external command), no merge driver, and none of the
conversions git does itself (line endings, ``$Id$``, encodings): memory is stored as
written."""
ALLOWED = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "user.name",
        "user.email",
        "commit.gpgsign",
        "gc.auto",
    }
)
"""Config keys agentd or ``git init`` write; git lists keys with section and name in
lower case."""
_REQUIRED_VALUES = {"core.repositoryformatversion": "0", "core.bare": "false"}
"""A repository format 1 turns on extensions; a bare repo has no checkout to pin."""
CONFIG_MAX_BYTES = 64 * 1024
"""Far above the few hundred bytes agentd writes; a larger config is not read, but replaced."""
FALLBACK_NAME = "agentd"
FALLBACK_EMAIL = "agentd@agentd.local"
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9 _.@+~()-]*")
"""A value written without quotes is exactly as git reads it back."""
_FILE_SYSTEM_KEYS = ("core.ignorecase", "core.precomposeunicode", "core.symlinks")
"""What ``git init`` writes where the file system differs (case-insensitive, macOS's
Unicode, no symbolic links); kept, so git goes on knowing it."""
_SECTION = re.compile(r"\[([a-z]+)\]")
_ENTRY = re.compile(rf"\t([a-z]+) = ({_PLAIN_VALUE.pattern})")

Entries = Sequence[tuple[str, str]]


def unexpected(entries: Entries | None) -> list[str]:
    """The config keys (or key=value) agentd did not write; ``None`` entries (git could not
    parse the file) are one problem of their own."""
    if entries is None:
        return ["none git can read"]
    found = []
    for key, value in entries:
        if key not in ALLOWED:
            found.append(key)
        elif _REQUIRED_VALUES.get(key, value) != value:
            found.append(f"{key}={value}")
    return list(dict.fromkeys(found))


def canonical(entries: Entries | None) -> bytes:
    """The config agentd writes, with the identity ``entries`` hold (git's last value
    wins, as when git reads it) or a neutral one, and what ``git init`` found out about
    the file system (:data:`_FILE_SYSTEM_KEYS`)."""
    values = dict(entries or ())
    filemode = values.get("core.filemode", "true")
    lines = [
        "[core]",
        "\trepositoryformatversion = 0",
        f"\tfilemode = {filemode if filemode in ('true', 'false') else 'true'}",
        "\tbare = false",
        "\tlogallrefupdates = true",
        *(
            f"\t{key.removeprefix('core.')} = {values[key]}"
            for key in _FILE_SYSTEM_KEYS
            if values.get(key) in ("true", "false")
        ),
        "[user]",
        f"\tname = {_quoted(values.get('user.name') or FALLBACK_NAME)}",
        f"\temail = {_quoted(values.get('user.email') or FALLBACK_EMAIL)}",
        "[commit]",
        "\tgpgsign = false",
        "[gc]",
        "\tauto = 0",
    ]
    return ("\n".join(lines) + "\n").encode()


def is_canonical(config: bytes) -> bool:
    """Whether ``config`` is byte for byte what :func:`canonical` writes for some identity
    of plain values: then git reads from it exactly the entries it was written from, all
    allowed, and it needs no parse by git. Anything else (another layout, a quoted value,
    a key more) says no, and git is asked."""
    entries = plain_entries(config)
    return entries is not None and canonical(entries) == config


def plain_entries(config: bytes) -> list[tuple[str, str]] | None:
    """The entries of a config of plain ``[section]`` and ``\tkey = value`` lines (as
    :func:`canonical` and ``git init`` write them), or None for any other: what git reads
    from it, but for the blanks git strips from a value's end, which is why
    :func:`is_canonical` confirms it by writing it again."""
    try:
        text = config.decode("ascii")
    except UnicodeDecodeError:
        return None
    entries, section = [], None
    for line in text.split("\n")[:-1]:
        if header := _SECTION.fullmatch(line):
            section = header[1]
        elif (entry := _ENTRY.fullmatch(line)) and section is not None:
            entries.append((f"{section}.{entry[1]}", entry[2]))
        else:
            return None
    return entries


def attributes_in_place(git_dir: Path) -> bool:
    """Whether ``info/attributes`` is a plain file holding exactly :data:`ATTRIBUTES`."""
    return read_bytes(git_dir / "info" / "attributes") == ATTRIBUTES


def write_attributes(git_dir: Path) -> None:
    """Put :data:`ATTRIBUTES` in ``info/attributes``; a link or file where ``info`` should
    be is removed first, so nothing is written through it."""
    info = git_dir / "info"
    if info.is_symlink() or (info.exists() and not info.is_dir()):
        info.unlink()
    info.mkdir(exist_ok=True)
    replace_file(info / "attributes", ATTRIBUTES)


def read_bytes(path: Path, limit: int = CONFIG_MAX_BYTES) -> bytes | None:
    """A small file's bytes, not through a link at ``path`` (nor waiting on a FIFO); None
    if there is no file, or one over ``limit`` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            data = file.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once: a temp file beside it, renamed over it (a
    link at ``path`` is replaced, never written through)."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise


def _quoted(value: str) -> str:
    if _PLAIN_VALUE.fullmatch(value) and value == value.strip():
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\t", "\\t").replace("\b", "\\b") + '"'
