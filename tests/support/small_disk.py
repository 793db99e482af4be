"""A tiny tmpfs to fill to its last page and empty again: the disk a write is refused on
for want of space (ENOSPC), as a real full disk refuses it.

Filling it leaves the slack in the last page of a file writable, so a long write is done
in part and then refused: exactly the torn write a real full disk produces. Mounting
needs root; without it the tests that use it are skipped (see the ``small_disk`` fixture
in ``tests/conftest.py``).
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


class SmallDisk:
    """A 4 MiB tmpfs that can be filled to the last page (or to a given room) and emptied
    again."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.home = mount / "home"
        self.filler = mount / "filler"

    def fill(self, leave: int = 0) -> None:
        """Fill the disk; ``leave`` bytes (rounded up to whole pages) stay free."""
        room = self.mount / "room"
        if leave:
            room.write_bytes(b"\0" * leave)
        chunk = b"\0" * (64 * 1024)
        with open(self.filler, "ab", buffering=0) as handle:
            try:
                while True:
                    handle.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        room.unlink(missing_ok=True)

    def free(self) -> None:
        self.filler.unlink()


@contextlib.contextmanager
def mounted_small_disk() -> Iterator[SmallDisk]:
    """A fresh small tmpfs, unmounted after; skips the test where it cannot be mounted."""
    mount = Path(tempfile.mkdtemp(prefix="agentd-disk-", dir="/tmp"))
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        reason = mounted.stderr.strip() or f"exit status {mounted.returncode}"
    except FileNotFoundError:
        mounted, reason = None, "no mount command"
    if mounted is None or mounted.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a small tmpfs here ({reason}); this test needs root")
    try:
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        mount.rmdir()
