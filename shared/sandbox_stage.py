"""Stage what a sandbox shows on filesystems of its own, then run bubblewrap.

A plain bind mount keeps the path of its source: ``/proc/self/mountinfo`` in the sandbox
names the directory it came from (``/home/alice/.agentd/agents/<id>/memory``), whatever
the destination is called. Only a mount with a filesystem of its own shows its root as
``/``. So before bubblewrap runs, this script (run by :mod:`shared.sandbox` as
``python -I -S sandbox_stage.py PLAN -- bwrap …``, in the process that then becomes
bubblewrap) enters a user and mount namespace of its own and mounts there, over a fresh
tmpfs on ``/tmp``:

- every writable directory as an overlay whose only layer is the directory itself (the
  ``upper`` layer; the lower one is empty): reads and writes go straight to the host's
  files, and the overlay's options name only the staging paths (``/tmp/p0/memory``);
- every read-only file as a copy in the tmpfs (the payload of a reflection).

bubblewrap then binds these staged paths at their neutral names, and nothing the model
can read names a host path. The namespace dies with the sandbox; the overlay's work
directory (``.<name>.sandbox`` beside each writable directory, which overlayfs needs on
the same mount) is removed by the caller once the command ended.

The script imports nothing but the standard library: it runs with ``-I -S``, before any
project code could be trusted or found. ``--check PLAN`` stages and exits: whether this
host and these filesystems allow it (user namespaces, overlayfs in them, user extended
attributes on the upper filesystem) is known only by trying.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

STAGE = "/tmp"
"""Where the staging tmpfs is mounted, inside the staging namespace only."""
_SCRATCH_SUFFIX = ".sandbox"
FAILED = 125
"""The exit status when staging failed: nothing of the command ran."""
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


def parent_mount(index: int) -> str:
    """Where the parent directory of writable directory ``index`` is bound."""
    return f"{STAGE}/p{index}"


def overlay_mount(index: int) -> str:
    """The staged writable directory ``index``: what bubblewrap binds."""
    return f"{STAGE}/o{index}"


def file_copy(index: int) -> str:
    """The staged copy of read-only file ``index``: what bubblewrap binds."""
    return f"{STAGE}/f{index}"


def scratch_name(name: str) -> str:
    """The overlay work directory beside writable directory ``name`` (on the host)."""
    return f".{name}{_SCRATCH_SUFFIX}"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    kind: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    encoded = [None if value is None else value.encode() for value in (source, kind, data)]
    _call(libc.mount(encoded[0], target.encode(), encoded[1], flags, encoded[2]), f"mount {target}")


def _enter_namespaces(libc: ctypes.CDLL) -> None:
    """A user namespace where this user is root (so it may mount), and a private mount
    namespace in it: nothing mounted here is seen outside."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)


def stage(plan: dict[str, list]) -> None:
    """Mount ``plan``: ``overlays`` are ``[parent, name]`` pairs (the writable directory
    ``parent/name``), ``files`` are host paths of read-only files."""
    libc = _libc()
    _enter_namespaces(libc)
    # Opened and read before the tmpfs covers /tmp, where a home may live.
    parents = [
        os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
        for parent, _ in plan["overlays"]
    ]
    contents = []
    for path in plan["files"]:
        with open(path, "rb") as file:
            contents.append(file.read())
    _mount(libc, "agentd-stage", STAGE, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0700")
    empty = f"{STAGE}/empty"
    os.mkdir(empty)
    for index, ((_, name), fd) in enumerate(zip(plan["overlays"], parents, strict=True)):
        parent = parent_mount(index)
        os.mkdir(parent)
        _mount(libc, f"/proc/self/fd/{fd}", parent, None, _MS_BIND)
        os.close(fd)
        work = f"{parent}/{scratch_name(name)}"
        os.makedirs(work, exist_ok=True)
        os.mkdir(overlay_mount(index))
        options = f"lowerdir={empty},upperdir={parent}/{name},workdir={work},userxattr,xino=off"
        _mount(libc, "overlay", overlay_mount(index), "overlay", _MS_NOSUID | _MS_NODEV, options)
    for index, data in enumerate(contents):
        with open(file_copy(index), "wb") as file:
            file.write(data)
        os.chmod(file_copy(index), 0o444)


def main(argv: list[str]) -> int:
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    try:
        stage(json.loads(argv[0]))
    except (OSError, ValueError, KeyError) as exc:
        # Said to the model when it happens to a command: no path, only what failed.
        detail = exc if check else (getattr(exc, "strerror", None) or type(exc).__name__)
        print(f"the sandbox could not be set up: {detail}", file=sys.stderr)
        return FAILED
    if check:
        return 0
    command = argv[argv.index("--") + 1 :]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"the sandbox could not be started: {exc.strerror}", file=sys.stderr)
    return FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
