"""A job's scratch directory on a worker: the memory clone, the payload, the transcript.

Everything a job writes is under ``$AGENTD_WORKER_DIR/jobs/<pid>-<reflection id>/``:
``memory/`` (a clone of the job's memory bundle, :mod:`shared.memory.clone`, which the
sub-agent's shell sees as ``/memory``), ``transcript/`` (the payload's files, ``/transcript``),
``conversations/`` (the sub-agent's own transcript) and the two bundles. Nothing of the
daemon's home: a worker host has none. The directory goes when the job ends; one a killed
worker left behind is removed by the next worker that starts on the host (its owner's pid
is in its name, so a live job's is never touched).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import structlog

from shared.ids import validate_id
from shared.memory import bundles
from shared.memory.clone import BRANCH_PREFIX, Clone, init_clone, purge

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Scratch:
    """One job's directory and the places in it."""

    root: Path

    @property
    def memory(self) -> Path:
        return self.root / "memory"

    @property
    def transcript(self) -> Path:
        return self.root / "transcript"

    @property
    def conversations(self) -> Path:
        return self.root / "conversations"

    @property
    def input_bundle(self) -> Path:
        return self.root / "input.bundle"

    @property
    def answer_bundle(self) -> Path:
        return self.root / "answer.bundle"

    def remove(self) -> None:
        purge(self.root)


def open_scratch(worker_dir: Path, reflection_id: str) -> Scratch:
    """A fresh scratch directory for one run of job ``reflection_id``."""
    validate_id(reflection_id, "reflection job id")
    name = f"{os.getpid()}-{reflection_id}-{secrets.token_hex(3)}"
    root = worker_dir.absolute() / "jobs" / name
    root.mkdir(parents=True, mode=0o700)
    return Scratch(root)


def clone_memory(
    scratch: Scratch, bundle: bytes, job_id: str, base_head: str, author_email: str
) -> Clone:
    """Clone the job's memory bundle into ``scratch.memory`` on ``reflection/<job_id>``."""
    scratch.input_bundle.write_bytes(bundle)
    clone = Clone(
        job_id=job_id,
        path=scratch.memory,
        branch=BRANCH_PREFIX + job_id,
        base_head=base_head,
        author_email=author_email,
    )
    init_clone(clone.path, base_head, clone.author_email)
    bundles.clone_snapshot(scratch.input_bundle, clone.path, clone.branch)
    scratch.input_bundle.unlink()
    return clone


def sweep_dead_jobs(worker_dir: Path) -> list[str]:
    """Remove the scratch directories of jobs whose process is gone (this host's only)."""
    removed = []
    jobs = worker_dir / "jobs"
    for entry in sorted(jobs.iterdir()) if jobs.is_dir() else []:
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        purge(entry)
        removed.append(entry.name)
    if removed:
        log.info("worker_scratch_swept", removed=removed)
    return removed


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
