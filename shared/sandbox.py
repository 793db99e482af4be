"""Bubblewrap: the wall around every shell a model drives (the agent's and the reflector's).

A model's shell sees a minimal system and nothing else of the host: ``/usr`` (and the
``/bin``, ``/lib`` links into it) read-only, a handful of ``/etc`` files a shell and git
need (never ``/etc`` whole: ``shadow``, ``agentd`` configs and keys live there), a fresh
``/proc`` of its own PID namespace, a private ``/dev`` and ``/tmp``, no network unless
asked, and exactly the paths the caller names, each under a neutral name (``/workspace``,
``/memory``, ``/transcript/…``: :class:`Bind`). ``$AGENTD_HOME``, other agents, ``/root``
and ``/home`` are simply not there, and nothing the model can read there names them:
not ``pwd`` or its environment, not bwrap's command line (``/proc/1/cmdline``), and not
``/proc/self/mountinfo``, which shows the source path of every bind mount. That last one
takes staging the binds on filesystems of their own first (:mod:`shared.sandbox_stage`,
:func:`command_argv`); where this host does not allow it (no overlayfs in a user
namespace, an upper filesystem without user extended attributes), the binds stay plain,
the sandbox still confines under the same names, the first such command logs
``sandbox_paths_visible`` with the reason, and :func:`hides_host_paths` answers for a
directory. A staged directory is an overlay: a file created in it from outside while a
command runs (another conversation's ``write_file`` in the workspace) may not show in
that command until the next one; what the command writes shows outside at once.

Two hazards shape the argv (``../shared/spec/sandbox.md``). bwrap itself is PID 1 inside
and keeps the environment it was started with, so callers start it with the already
scrubbed environment the shell gets (:func:`launch_env`), never the daemon's. And binds
are applied in order, so ``--tmpfs /tmp`` comes first: a path bound later under ``/tmp``
(a home under ``/tmp``, pytest's temporary dirs) stays visible instead of being hidden.

Whether bubblewrap works is probed once per process by running it: installed is not
enough where user namespaces or mounts are forbidden (many containers).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from shared import sandbox_stage

log = structlog.get_logger(__name__)

PROBE_TIMEOUT_S = 10.0
STAGE_SCRIPT = Path(sandbox_stage.__file__)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

SYSTEM_LINKS = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
"""Merged-/usr links; a host where one is a real directory gets it bound read-only."""
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/bash.bashrc",
    "/etc/inputrc",
    "/etc/magic",
    "/etc/mime.types",
)
"""What a shell, coreutils, git and jq read from ``/etc``; no secrets among them."""
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates")
"""Added only when the sandbox shares the host's network."""


@dataclass(frozen=True)
class Bind:
    """One host path a sandbox shows, and the neutral name it shows it under."""

    host: Path
    inside: str
    writable: bool = False
    """A writable bind must be a directory; a read-only one that does not exist is left out
    (a checkout without ``.git``)."""


@dataclass(frozen=True)
class Walls:
    """What one sandboxed command may see; everything else of the host is absent.

    Binds are applied in order: a read-only one inside a writable one (a checkout's
    ``.git``) comes after it."""

    cwd: str
    binds: tuple[Bind, ...] = ()
    network: bool = False


def bwrap_argv(
    walls: Walls, env: dict[str, str], sources: Mapping[Bind, str] | None = None
) -> list[str]:
    """The bubblewrap argv to put before the command; ``env`` is all the command gets.
    ``sources`` are where staged binds come from (:func:`command_argv`), else the host."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    if walls.network:
        args.append("--share-net")
    args += ["--ro-bind", "/usr", "/usr"]
    for link, target in SYSTEM_LINKS.items():
        host = Path(link)
        if host.is_symlink():
            args += ["--symlink", target, link]
        elif host.is_dir():
            args += ["--ro-bind", link, link]
    for name in (*ETC_FILES, *(NETWORK_ETC_FILES if walls.network else ())):
        if Path(name).exists():
            args += ["--ro-bind", name, name]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for bind in _present(walls):
        source = str(bind.host) if sources is None else sources[bind]
        args += ["--bind" if bind.writable else "--ro-bind", source, bind.inside]
    for name, value in {"PATH": SANDBOX_PATH, "TMPDIR": "/tmp", **env}.items():
        args += ["--setenv", name, value]
    args += ["--chdir", walls.cwd, "--"]
    return args


def command_argv(walls: Walls, env: dict[str, str], command: list[str]) -> list[str]:
    """The argv that runs ``command`` inside ``walls``: staged (:mod:`shared.sandbox_stage`),
    so that nothing in the sandbox names a host path, where this host allows it; else
    bubblewrap's plain binds, whose sources ``/proc/self/mountinfo`` shows. Call
    :func:`clear_scratch` once the command ended."""
    staging = _Staging.of(walls)
    if not staging.works():
        return [*bwrap_argv(walls, env), *command]
    plan = json.dumps(staging.plan)
    prefix = [sys.executable, "-I", "-S", str(STAGE_SCRIPT), plan, "--"]
    return [*prefix, *bwrap_argv(walls, env, staging.sources), *command]


def clear_scratch(walls: Walls) -> None:
    """Remove the overlay work directories a staged command left beside its writable
    directories (empty, but one of them mode 000)."""
    for bind in walls.binds:
        if bind.writable:
            remove_scratch(scratch_dir(bind.host))


def scratch_dir(directory: Path) -> Path:
    """Where the staged overlay of ``directory`` keeps its work directory."""
    return directory.parent / sandbox_stage.scratch_name(directory.name)


def scratch_owner(name: str) -> str | None:
    """The directory whose scratch directory ``name`` is (:func:`scratch_dir`), or None."""
    owner = name.removeprefix(".").removesuffix(sandbox_stage.scratch_name("")[1:])
    return owner if owner and sandbox_stage.scratch_name(owner) == name else None


def remove_scratch(path: Path) -> None:
    """Remove a work directory overlayfs left (its ``work`` inside is mode 000)."""
    if path.is_symlink() or not path.is_dir():
        return
    for name in ("work", "index"):
        with contextlib.suppress(OSError):
            (path / name).chmod(0o700)
    shutil.rmtree(path, ignore_errors=True)


def hides_host_paths(directory: Path) -> tuple[bool, str]:
    """Whether a sandbox with ``directory`` writable shows it without naming its host path,
    and in words why not (``agentd doctor``)."""
    staging = _Staging.of(Walls(cwd="/", binds=(Bind(directory, "/probe", writable=True),)))
    if staging.works():
        return True, "the sandbox shows its directories under neutral names only"
    return False, (
        "the sandbox shows its directories' host paths in /proc/self/mountinfo: staging "
        f"them failed on this host ({_CHECKED.get(staging.key, '')})"
    )


def _present(walls: Walls) -> list[Bind]:
    return [bind for bind in walls.binds if bind.writable or bind.host.exists()]


@dataclass(frozen=True)
class _Staging:
    """How :mod:`shared.sandbox_stage` mounts one set of walls, and where bubblewrap then
    finds each bind."""

    plan: dict[str, list[Any]]
    sources: dict[Bind, str]
    key: tuple[int, ...]
    """The devices of the writable directories' parents: staging works, or not, per
    filesystem (overlayfs needs user extended attributes on the upper one)."""

    @classmethod
    def of(cls, walls: Walls) -> _Staging:
        overlays: list[list[str]] = []
        files: list[str] = []
        sources: dict[Bind, str] = {}
        writable = [bind for bind in walls.binds if bind.writable]
        for bind in _present(walls):
            if bind.writable:
                if not set(bind.host.name).isdisjoint(_OVERLAY_SPECIAL):
                    raise ValueError(
                        f"a writable directory name cannot hold , : or \\: {bind.host}"
                    )
                sources[bind] = sandbox_stage.overlay_mount(len(overlays))
                overlays.append([str(bind.host.parent), bind.host.name])
                continue
            outer = next((w for w in writable if bind.host.is_relative_to(w.host)), None)
            if outer is not None:
                inner = bind.host.relative_to(outer.host).as_posix()
                sources[bind] = f"{sources[outer]}/{inner}"
            elif bind.host.is_file():
                sources[bind] = sandbox_stage.file_copy(len(files))
                files.append(str(bind.host))
            else:
                raise ValueError(
                    f"only files are shown read-only outside a writable directory: {bind.host}"
                )
        key = tuple(os.stat(parent).st_dev for parent, _ in overlays)
        return cls({"overlays": overlays, "files": files}, sources, key)

    def works(self) -> bool:
        """Staging these walls works on this host: checked once per set of filesystems
        (one check at a time: a check's clean-up must not meet a command it let start)."""
        with _CHECKING:
            if self.key not in _CHECKED:
                parents = {Path(parent): os.stat(parent) for parent, _ in self.plan["overlays"]}
                _CHECKED[self.key] = _check(self.plan)
                for parent, name in self.plan["overlays"]:
                    remove_scratch(scratch_dir(Path(parent) / name))
                for parent, before in parents.items():  # as untouched as it was (doctor)
                    os.utime(parent, ns=(before.st_atime_ns, before.st_mtime_ns))
                if _CHECKED[self.key]:
                    log.warning("sandbox_paths_visible", reason=_CHECKED[self.key])
            return not _CHECKED[self.key]


_CHECKING = threading.Lock()
_CHECKED: dict[tuple[int, ...], str] = {}
"""Per set of filesystems, why staging failed there ("" where it works)."""
_OVERLAY_SPECIAL = ",:\\"


def _check(plan: dict[str, list[Any]]) -> str:
    argv = [sys.executable, "-I", "-S", str(STAGE_SCRIPT), "--check", json.dumps(plan)]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=launch_env({}), timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def launch_env(env: dict[str, str]) -> dict[str, str]:
    """The environment to start bwrap with: bwrap stays PID 1 inside and keeps it, visible
    in ``/proc/1/environ``, so it gets only what the command itself is given."""
    return {"PATH": SANDBOX_PATH, **env}


def available() -> bool:
    """Whether bubblewrap runs on this host (probed once per process)."""
    return _probe()[0]


def reason() -> str:
    """One line on the sandbox: what it confines, or why it is off."""
    return _probe()[1]


@functools.cache
def _probe() -> tuple[bool, str]:
    path = shutil.which("bwrap")
    if path is None:
        return False, "sandbox off: bubblewrap (bwrap) is not on PATH; install it"
    with tempfile.TemporaryDirectory(prefix="agentd-bwrap-probe-") as scratch:
        probe_dir = Path(scratch)
        walls = Walls(cwd=str(probe_dir), binds=(Bind(probe_dir, str(probe_dir), writable=True),))
        argv = bwrap_argv(walls, {})
        try:
            probe = subprocess.run(
                [*argv, "touch", "written"],
                capture_output=True,
                text=True,
                env=launch_env({}),
                timeout=PROBE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"sandbox off: {path} could not be run: {exc}"
        written = (probe_dir / "written").exists()
    if probe.returncode != 0 or not written:
        detail = probe.stderr.strip() or f"exit code {probe.returncode}, nothing written"
        return False, f"sandbox off: {path} fails on this host ({detail})"
    return True, (
        f"sandbox on: {path} (minimal read-only system, only the checkout writable, "
        "private /proc and /tmp, no network)"
    )
