"""The trash: deleted agents and conversations are moved here whole, never erased.

A delete is one ``rename`` into ``$AGENTD_HOME/trash/<UTC time>-<id>/`` (same file system,
so atomic: the directory is either where it was or in the trash), and undoing it is the
rename back. Emptying the trash is left to the user.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import structlog

from shared.store.layout import Layout

log = structlog.get_logger(__name__)


def move_to_trash(layout: Layout, directory: Path, label: str, when: datetime) -> Path:
    """Move ``directory`` to ``trash/<when>-<label>`` (a suffix if that is taken)."""
    layout.trash_dir.mkdir(mode=0o700, exist_ok=True)
    stamp = when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = layout.trash_dir / f"{stamp}-{label}"
    number = 1
    while target.exists():
        number += 1
        target = layout.trash_dir / f"{stamp}-{label}-{number}"
    os.rename(directory, target)
    _sync_directory(directory.parent)
    _sync_directory(layout.trash_dir)
    log.info("moved_to_trash", source=str(directory), trash=str(target))
    return target


def _sync_directory(path: Path) -> None:
    """Make the rename durable: it is recorded in both directories' entries."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
