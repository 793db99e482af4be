"""The one way agentd runs git: inert to whatever a model or a stranger planted in a repo.

Git runs code named by configuration: hooks, ``core.fsmonitor``, ``core.sshCommand``,
transports like ``ext::``. A memory repo is written by models (the agent's tools, the
reflection sub-agent's clone), so the harness must never let a file in a repo decide what
runs in the daemon or a worker. Every harness git command therefore starts from a clean
slate: hooks off (``core.hooksPath=/dev/null``), ``core.fsmonitor=false``, only local
transports, no system or global config, an environment built from scratch (no ``GIT_*``
variable, no provider key inherited from the process), no prompt, and a timeout.

A git lock file in the way is removed and the command run again when the git that left it
is dead, and is :class:`~shared.errors.MemoryBusy` when a live git holds it
(:mod:`shared.memory.git_locks`), never mistaken for the command's own answer.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import overload

from shared.errors import MemoryRepoError
from shared.memory import git_locks

GIT_TIMEOUT_S = 30.0
HARDENED_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=false",
    "core.askPass=",
    "credential.helper=",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "core.quotePath=false",
    "core.sharedRepository=umask",
    "gc.auto=0",
)
"""``-c`` options on every command; they override the repo's own config."""
_PASSED_THROUGH = ("PATH", "TZ", "SYSTEMROOT")
"""The only variables taken from the process: where git is, and the zone dates use."""


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every harness git runs with; ``extra`` adds e.g. an author."""
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
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
    binary: bool = False,
) -> subprocess.CompletedProcess[str]: ...
@overload
def run(
    cwd: Path,
    *args: str,
    check: bool = ...,
    stdin: bytes | None = ...,
    env: Mapping[str, str] | None = ...,
    timeout: float = ...,
    binary: bool,
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
        proc = run_once(cwd, *args, stdin=stdin, env=env, timeout=timeout, binary=binary)
        stderr = proc.stderr.decode("utf-8", "replace") if binary else proc.stderr
        lock = git_locks.blocking_lock(stderr) if proc.returncode != 0 else None
        if lock is None:
            break
        git_locks.settle(lock, removed)
    if check and proc.returncode != 0:
        detail = first_line(stderr) or f"exit code {proc.returncode}"
        raise MemoryRepoError(f"git {args[0]} failed in {cwd}: {detail}")
    return proc


def run_once(
    cwd: Path,
    *args: str,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    binary: bool = False,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Run ``git -C cwd args`` once, hardened: for a command that must not be repeated
    after a lock failure (a merge may have stopped halfway)."""
    argv = ["git", *_config_args(), "-C", str(cwd), *args]
    text_mode = {} if binary else {"text": True, "encoding": "utf-8", "errors": "replace"}
    try:
        return subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            env=clean_env(env),
            timeout=timeout,
            check=False,
            **text_mode,  # type: ignore[call-overload]
        )
    except subprocess.TimeoutExpired as exc:
        raise MemoryRepoError(f"git {args[0]} timed out after {timeout:.0f} s in {cwd}") from exc
    except OSError as exc:
        raise MemoryRepoError(f"git could not be run: {exc}; is git installed?") from exc


def first_line(text: str) -> str:
    """Git's first non-empty line of output: the message worth showing."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _config_args() -> list[str]:
    args: list[str] = []
    for option in HARDENED_CONFIG:
        args += ["-c", option]
    return args
