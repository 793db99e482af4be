"""Bubblewrap: the wall around every shell a model drives (the agent's and the reflector's).

A model's shell sees a minimal system and nothing else of the host: ``/usr`` (and the
``/bin``, ``/lib`` links into it) read-only, a handful of ``/etc`` files a shell and git
need (never ``/etc`` whole: ``shadow``, ``agentd`` configs and keys live there), a fresh
``/proc`` of its own PID namespace, a private ``/dev`` and ``/tmp``, no network unless
asked, and exactly the paths the caller names. ``$AGENTD_HOME``, other agents, ``/root``
and ``/home`` are simply not there.

Two hazards shape the argv (``../shared/spec/sandbox.md``). bwrap itself is PID 1 inside
and keeps the environment it was started with, so callers start it with the already
scrubbed environment the shell gets (:func:`launch_env`), never the daemon's. And binds
are applied in order, so ``--tmpfs /tmp`` comes first: a path bound later under ``/tmp``
(a home under ``/tmp``, pytest's temporary dirs) stays visible instead of being hidden.

Whether bubblewrap works is probed once per process by running it: installed is not
enough where user namespaces or mounts are forbidden (many containers).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PROBE_TIMEOUT_S = 10.0
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
class Walls:
    """What one sandboxed command may see; everything else of the host is absent."""

    cwd: Path
    writable: list[Path] = field(default_factory=list)
    readable: list[Path] = field(default_factory=list)
    """Bound read-only at the same path (the payload, a parent repo's objects)."""
    read_only_inside: list[Path] = field(default_factory=list)
    """Paths under a writable one that stay read-only (a checkout's ``.git``)."""
    network: bool = False


def bwrap_argv(walls: Walls, env: dict[str, str]) -> list[str]:
    """The bubblewrap argv to put before the command; ``env`` is all the command gets."""
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
    for path in walls.writable:
        args += ["--bind", str(path), str(path)]
    for path in walls.readable:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for path in walls.read_only_inside:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for name, value in {"PATH": SANDBOX_PATH, "TMPDIR": "/tmp", **env}.items():
        args += ["--setenv", name, value]
    args += ["--chdir", str(walls.cwd), "--"]
    return args


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
        argv = bwrap_argv(Walls(cwd=probe_dir, writable=[probe_dir]), {})
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
