"""The one way agentd runs git: inert to whatever a model or a stranger planted in a repo.

Git runs code named by configuration and attributes: hooks, ``core.fsmonitor``,
``core.sshCommand``, transports like ``ext::``, filter, diff and merge drivers, and, in a
repository nested in the checkout, whatever *that* repository's config says. A memory
repo is written by models (the agent's tools, the reflection sub-agent's clone), so the
harness must never let a file in a repo decide what runs in the daemon or a worker. Every
harness git command therefore starts from a clean slate:

- ``-c`` options (:data:`HARDENED_CONFIG`, each with its reason) that override the repo's
  own config: no hook, fsmonitor, ssh command, prompt, signing or auto-gc, only local
  transports, and submodules neither entered nor recursed into: ``git status`` in a
  checkout holding a nested repository would otherwise run ``git status`` *inside* it,
  under its config, which can name a filter (issue 21). ``git add`` goes in whatever the
  options say, so memory commits take nested repositories out first
  (:mod:`shared.memory.screen`).
- The repository's own ``.git/config`` and ``info/attributes`` pinned to what agentd
  writes, checked before each command and put back if anything else is there
  (:mod:`shared.memory.git_pin`): a driver has a name of its writer's choosing, so no
  ``-c`` can switch it off. The check costs two small reads when nothing changed (10 to
  40 µs, measured, beside the 1.5 ms a git process costs; ``MemoryRepo.head``, on every
  turn, runs no git and no check). A config byte for byte as agentd writes it needs no
  parse; any other is parsed by git, once a process while it stays the same.
- No system, global or user config or attributes, an environment built from scratch (no
  ``GIT_*`` variable, no provider key inherited from the process), and a timeout.

``cwd`` is always a repository's root (or a directory in no repository, for ``init`` and
``clone``): that is where ``.git`` is checked. A ``.git`` that is a link or a file
(``gitdir:``) would send git to another repository, so git is not run there.

A git lock file in the way is removed and the command run again when the git that left it
is dead, and is :class:`~shared.errors.MemoryBusy` when a live git holds it
(:mod:`shared.memory.git_locks`), never mistaken for the command's own answer.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, overload

import structlog

from shared.errors import MemoryRepoError
from shared.memory import git_locks, git_pin

log = structlog.get_logger(__name__)

GIT_TIMEOUT_S = 30.0
HARDENED_CONFIG = (
    "core.hooksPath=/dev/null",  # no hook runs
    "core.fsmonitor=false",  # no fsmonitor command runs
    "core.sshCommand=false",  # nor an ssh command,
    "core.askPass=",  # nor a password prompt,
    "credential.helper=",  # nor a credential helper
    "protocol.allow=never",  # no transport at all (ext::, ssh, http) …
    "protocol.file.allow=always",  # … but a local path
    "commit.gpgsign=false",  # no gpg.program to sign
    "tag.gpgsign=false",
    "log.showSignature=false",  # nor to verify one a model's commit carries
    "core.quotePath=false",
    "core.sharedRepository=umask",
    "gc.auto=0",  # no gc behind our back (the memory lock is ours to take)
    "maintenance.auto=false",
    "core.attributesFile=/dev/null",  # no user attributes (info/attributes is pinned)
    "core.autocrlf=false",  # memory is stored as written
    "safe.bareRepository=explicit",  # a bare repo a model laid out is never discovered
    "submodule.recurse=false",  # checkout, reset, merge never descend into a submodule
    "diff.ignoreSubmodules=all",  # status and diff never look inside one (add does)
    "status.submoduleSummary=false",
    "diff.submodule=short",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
)
"""``-c`` options on every command; they override the repo's own config (which is pinned
too: :mod:`shared.memory.git_pin`). Checked on git 2.39 against a tracked nested repository
whose config names a filter: with these, ``status``, ``diff``, ``log -p``, ``blame``,
``checkout``, ``reset``, ``merge``, ``revert`` and ``stash`` leave it alone (without them
``status`` ran the filter). ``git add`` has no such switch (``add -A`` runs ``git status``
inside a tracked nested repository whatever the config says), so a nested ``.git`` is
never in the checkout when the harness stages: :meth:`MemoryRepo.commit_all
<shared.memory.repo.MemoryRepo.commit_all>` removes or refuses it first."""
_PASSED_THROUGH = ("PATH", "TZ", "SYSTEMROOT")
"""The only variables taken from the process: where git is, and the zone dates use."""


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every harness git runs with; ``extra`` adds e.g. an author."""
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_ATTR_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        GIT_EDITOR="true",
        HOME="/nonexistent",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


@overload
def run(
    cwd: Path,
    *args: str,
    check: bool = ...,
    stdin: str | None = ...,
    env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    binary: Literal[False] = False,
) -> subprocess.CompletedProcess[str]: ...
@overload
def run(
    cwd: Path,
    *args: str,
    check: bool = ...,
    stdin: bytes | None = ...,
    env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    binary: Literal[True],
) -> subprocess.CompletedProcess[bytes]: ...
def run(
    cwd: Path,
    *args: str,
    check: bool = True,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    binary: bool = False,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Run ``git -C cwd args`` hardened, past a stale git lock (removed, then run again).

    ``check`` raises :class:`MemoryRepoError` on a non-zero exit; without it the caller
    reads the exit code as an answer (``merge-base --is-ancestor``, ``diff --quiet``). A
    lock a live git holds raises :class:`MemoryBusy` either way.
    """
    removed: set[Path] = set()
    while True:
        proc = _once(cwd, args, stdin=stdin, env=env, timeout=timeout, binary=binary)
        stderr = _text(proc.stderr)
        lock = git_locks.blocking_lock(stderr) if proc.returncode != 0 else None
        if lock is None:
            break
        git_locks.settle(lock, removed)
    if check and proc.returncode != 0:
        detail = first_line(stderr) or f"exit code {proc.returncode}"
        raise MemoryRepoError(f"git {args[0]} failed in {cwd}: {detail}")
    return proc


@overload
def run_once(
    cwd: Path,
    *args: str,
    stdin: str | None = ...,
    env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    binary: Literal[False] = False,
) -> subprocess.CompletedProcess[str]: ...
@overload
def run_once(
    cwd: Path,
    *args: str,
    stdin: bytes | None = ...,
    env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    binary: Literal[True],
) -> subprocess.CompletedProcess[bytes]: ...
def run_once(
    cwd: Path,
    *args: str,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    binary: bool = False,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Run ``git -C cwd args`` once, hardened: for a command that must not be repeated
    after a lock failure (a merge may have stopped halfway). The repository at ``cwd`` is
    pinned first (:func:`pin`)."""
    return _once(cwd, args, stdin=stdin, env=env, timeout=timeout, binary=binary)


def _once(
    cwd: Path,
    args: tuple[str, ...],
    *,
    stdin: str | bytes | None,
    env: Mapping[str, str] | None,
    timeout: float,
    binary: bool,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    pin(cwd)
    argv = ["-C", str(cwd.absolute()), *args]
    return _spawn(argv, cwd, stdin=stdin, env=env, timeout=timeout, binary=binary)


def pin(repo_dir: Path) -> list[str]:
    """Make the repository at ``repo_dir`` say nothing to git that agentd did not write
    (:mod:`shared.memory.git_pin`); what had to be put back. Nothing to do for a directory
    without ``.git`` (``init`` and ``clone`` run there)."""
    git_dir = _own_git_dir(repo_dir)
    if git_dir is None:
        return []
    config = git_pin.read_bytes(git_dir / "config")
    attributes = git_pin.attributes_in_place(git_dir)
    restored: list[str] = []
    if config is None or not (_pinned.get(git_dir) == config or git_pin.is_canonical(config)):
        config, restored = _checked_config(repo_dir, git_dir, config)
    elif attributes:
        return []
    if not attributes:
        git_pin.write_attributes(git_dir)
        restored.append(".git/info/attributes")
    _remember(git_dir, config)
    return restored


def _checked_config(repo_dir: Path, git_dir: Path, config: bytes | None) -> tuple[bytes, list[str]]:
    """The config, parsed by git, and what was put back: agentd's config, if it held
    anything agentd did not write, or git cannot read it."""
    entries = config_entries(git_dir / "config") if config is not None else None
    if not (unexpected := git_pin.unexpected(entries)) and config is not None:
        return config, []
    config = git_pin.canonical(entries)
    git_pin.replace_file(git_dir / "config", config)
    log.warning("git_config_restored", repo=str(repo_dir), unexpected=unexpected)
    return config, [f".git/config (it held {', '.join(unexpected)})"]


def write_config(repo_dir: Path, name: str, email: str) -> None:
    """Give the repository at ``repo_dir`` agentd's config (:func:`git_pin.canonical`)
    with this identity, keeping what ``git init`` found out about the file system: one
    file written, where a ``git config`` per key took a process each, and a config every
    later process finds pinned without asking git to parse it. What ``git init`` wrote is
    read from the bytes already in hand; a config of another layout is parsed by git."""
    git_dir = _own_git_dir(repo_dir)
    if git_dir is None:
        raise MemoryRepoError(f"{repo_dir} holds no git repository to configure")
    path = git_dir / "config"
    written = git_pin.read_bytes(path)
    found = None if written is None else git_pin.plain_entries(written) or config_entries(path)
    config = git_pin.canonical([*(found or ()), ("user.name", name), ("user.email", email)])
    git_pin.replace_file(path, config)
    _remember(git_dir, config)


def _remember(git_dir: Path, config: bytes) -> None:
    if len(_pinned) >= _PINNED_KEPT:  # a worker meets a new clone every job
        del _pinned[next(iter(_pinned))]
    _pinned[git_dir] = config


def pin_problems(repo_dir: Path) -> list[str]:
    """What :func:`pin` would put back, found without writing anything (``agentd
    doctor``): empty when the repository's config and attributes are agentd's."""
    git_dir = _own_git_dir(repo_dir)
    if git_dir is None:
        return []
    problems = []
    config = git_pin.read_bytes(git_dir / "config")
    entries = config_entries(git_dir / "config") if config is not None else None
    if unexpected := git_pin.unexpected(entries):
        problems.append(f".git/config holds {', '.join(unexpected)}: agentd did not write it")
    if not git_pin.attributes_in_place(git_dir):
        problems.append(".git/info/attributes does not unset filters and drivers")
    return problems


def config_entries(config: Path) -> list[tuple[str, str]] | None:
    """Every ``(key, value)`` of the config file ``config`` as git itself reads it,
    includes not followed; None if git cannot parse it. Runs nothing the file names."""
    argv = ["config", "--file", str(config), "--no-includes", "--null", "--list"]
    listed = _spawn(argv, Path("/"))
    if listed.returncode != 0:
        return None
    entries = []
    for record in str(listed.stdout).split("\0"):
        if record:
            key, _, value = record.partition("\n")
            entries.append((key, value))
    return entries


def version() -> str:
    """``git --version``'s answer, for ``agentd doctor``."""
    return first_line(str(_spawn(["--version"], Path("/")).stdout))


_PINNED_KEPT = 256
_pinned: dict[Path, bytes] = {}
"""Each repository's config as last found to be, or made, agentd's: the same bytes again
need no parse."""


def _own_git_dir(repo_dir: Path) -> Path | None:
    git_dir = repo_dir.absolute() / ".git"
    try:
        mode = os.lstat(git_dir).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISDIR(mode):
        raise MemoryRepoError(
            f"{git_dir} is a link or a file, not a git directory: git would follow it to "
            "another repository, so agentd runs no git there"
        )
    return git_dir


def _spawn(
    args: list[str],
    cwd: Path,
    *,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    binary: bool = False,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """The one place a git process starts: hardened options, a clean environment. ``cwd``
    is where the command is about (``args`` say ``-C cwd`` where it matters)."""
    argv = ["git", *_config_args(), *args]
    text_mode = {} if binary else {"text": True, "encoding": "utf-8", "errors": "replace"}
    try:
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            cwd="/",
            env=clean_env(env),
            timeout=timeout,
            check=False,
            # the mode is chosen at run time, where run's overloads want it spelled out
            **text_mode,  # type: ignore[call-overload]
        )
    except subprocess.TimeoutExpired as exc:
        command = args[2] if args[0] == "-C" else args[0]
        raise MemoryRepoError(f"git {command} timed out after {timeout:.0f} s in {cwd}") from exc
    except OSError as exc:
        raise MemoryRepoError(f"git could not be run: {exc}; is git installed?") from exc


def _text(output: str | bytes) -> str:
    """Git's output as text, whichever mode it ran in (for reading its messages)."""
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output


def first_line(text: str) -> str:
    """Git's first non-empty line of output: the message worth showing."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _config_args() -> list[str]:
    args: list[str] = []
    for option in HARDENED_CONFIG:
        args += ["-c", option]
    return args
