"""State files: written by write-temp-then-rename, read with a typed error on corruption.

A reader sees either the old file or the new one, never half of each, because
``os.replace`` is atomic on POSIX and the temp file is fsync'd before the rename. A write
that fails (a full disk, typically) removes its temp file: left behind, it would hold
the very space the user is trying to free.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shared.errors import CorruptStateFile
from shared.models.migrations import StateKind, migrate
from shared.store.writes import raise_if_disk_full, write_all

ModelT = TypeVar("ModelT", bound=BaseModel)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``; on failure ``path`` is as it was and no temp is left.

    Raises :class:`DiskFull` when the disk has no room for ``data``.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise_if_disk_full(exc, path, len(data))
        raise


def write_model_atomic(path: Path, model: BaseModel) -> None:
    write_bytes_atomic(path, model.model_dump_json(indent=2).encode() + b"\n")


def read_model(path: Path, model_type: type[ModelT]) -> ModelT | None:
    """The model stored at ``path``; None if the file does not exist.

    A model that names its ``schema_kind`` is read through the migration registry: an
    older file is upgraded (in memory; the next write stores the new version).

    Raises :class:`CorruptStateFile` when the file is not valid JSON or not the model, and
    :class:`StateFileTooNew` when a newer agentd wrote it.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    kind = getattr(model_type, "schema_kind", None)
    try:
        if kind is None:
            return model_type.model_validate_json(raw)
        return model_type.model_validate(_migrated(path, raw, kind))
    except ValidationError as exc:
        try:
            json.loads(raw)
        except ValueError:
            raise CorruptStateFile(path, "not valid JSON") from exc
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise CorruptStateFile(path, f"{where}: {first['msg']}") from exc


def _migrated(path: Path, raw: bytes, kind: StateKind) -> Any:
    """The stored object upgraded to ``kind``'s current version (a non-object is passed
    on for validation to refuse)."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CorruptStateFile(path, "not valid JSON") from exc
    return migrate(kind, data, path) if isinstance(data, dict) else data
