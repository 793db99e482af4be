"""What the attack suites share: canaries, a loopback listener, and a fingerprint of trees.

An attack passes only if nothing it aimed at changed. Rather than checking the files an
attacker was expected to touch, the suites take a fingerprint of every file under the
trees that must stay put (paths, modes, contents, symlink targets) before and after, and
compare them whole: a write the test author did not think of shows up too.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from collections.abc import Iterable
from pathlib import Path

CANARY_KEY = "sk-canary-5f1e0c9a7b"
"""Planted as a provider key in the environment and in ``agentd.toml``."""
TRIPWIRE = "agentd-tripwire"
"""Hooks and planted commands write a file with this name when they run."""


def fingerprint(root: Path, *, skip: Iterable[Path] = ()) -> dict[str, str]:
    """Every entry under ``root`` by relative path: its type, mode and content hash.

    Symlinks are recorded, never followed; ``skip`` names subtrees allowed to change.
    """
    skipped = {path.absolute() for path in skip}
    found: dict[str, str] = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        here = Path(directory)
        dirs[:] = [name for name in dirs if (here / name).absolute() not in skipped]
        for name in [*dirs, *files]:
            path = here / name
            if path.absolute() in skipped:
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                content = "link:" + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                content = "dir" if stat.S_ISDIR(info.st_mode) else "other"
            found[str(path.relative_to(root))] = f"{oct(info.st_mode)} {content}"
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths added, removed or altered between two fingerprints."""
    return sorted(
        path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
    )


class Listener:
    """A TCP listener on loopback that counts who connected: the network must be gone."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.setblocking(False)
        self.port: int = self.socket.getsockname()[1]

    def connections(self) -> int:
        count = 0
        while True:
            try:
                peer, _ = self.socket.accept()
            except BlockingIOError:
                return count
            peer.close()
            count += 1

    def close(self) -> None:
        self.socket.close()


def tripwire_script(directory: Path) -> Path:
    """An executable that, if anything ever runs it, leaves a file and calls home."""
    script = directory / "tripwire.sh"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> "{directory / TRIPWIRE}"\nenv >> "{directory / TRIPWIRE}"\n'
    )
    script.chmod(0o755)
    return script


def tripped(directory: Path) -> bool:
    return (directory / TRIPWIRE).exists()
