"""What crosses between the daemon and a reflection worker for one job, in both directions.

The daemon sends a :class:`JobMessage` through Celery, naming a :class:`JobInput` it put
in Redis beside a bundle of memory (:mod:`shared.memory.bundles`): everything the run
reads — the payload's files and what they show, the model to run, the core-memory budget,
the user's timezone, the pause to respect — so a worker needs nothing but Redis and its own
model settings. The worker answers with a :class:`JobAnswer` (and a bundle of its
commits): what it did, what it read (the sub-agent's transcript), and nothing the daemon
has to believe: the daemon judges the reading itself and checks the commits before one of
them reaches memory.

Both shapes carry :data:`JOB_FORMAT`. A worker meets a job of a newer format when it runs
an older agentd than the daemon: it answers ``failed: worker_outdated`` instead of
guessing, and the daemon refuses an answer of a format it does not know the same way.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.clock import utc_now
from shared.models.reflection import ReflectionRequest
from shared.reflection.pause import Pause
from shared.reflection.payload import PayloadFile, relocate_manifest

JOB_FORMAT = 1
"""Bumped whenever :class:`JobInput` or :class:`JobAnswer` change in a way an older side
would misread."""
MAX_TRANSCRIPT_BYTES = 16 * 1024 * 1024
"""The sub-agent's transcript an answer may carry: twelve steps of capped tool results are
well under it."""


class MemoryBudget(BaseModel):
    """How much of the agent's prompt its core memory may take (the daemon's measure)."""

    model_config = ConfigDict(frozen=True)

    limit_tokens: int
    """Half the agent's compaction threshold."""
    floor_tokens: int
    """The agent's prompt floor (base prompt, compiled memory, tools) at the job's start."""


class JobMessage(BaseModel):
    """The Celery message of a job: which input to fetch, and how big it said it is."""

    format: int = JOB_FORMAT
    job_id: str
    input_id: str
    agent_id: str
    input_bytes: int
    """The bundle's size as sent: a worker refuses a larger one before reading it."""


class JobInput(BaseModel):
    """Everything a worker's run reads, kept in Redis while the job waits or runs."""

    format: int = JOB_FORMAT
    job_id: str
    input_id: str
    """This copy of the inputs: a job sent again after Redis lost them gets new ones, and
    an answer counts only for the inputs the daemon holds now."""
    reflection_id: str
    request: ReflectionRequest
    agent_name: str
    base_head: str
    """The memory commit the bundle holds."""
    model: str
    """The sub-agent's model string (the agent's settings, resolved by the daemon)."""
    context_window: int
    """The sub-agent's window as the daemon measured the payload for it."""
    memory_budget: MemoryBudget
    payload: PayloadFile
    """What the payload shows, with the daemon's paths (a worker moves it: :meth:`files_in`)."""
    files: dict[str, str]
    """The payload's files by name: the parts, and the manifest when there is one."""
    output_chars: int
    max_steps: int
    timezone: str
    """The user's IANA zone: "today" is their date, whatever the worker's host says."""
    pause: Pause | None = None
    """An automatic run does not start while this pause holds for the worker's setup."""
    sent_at: datetime = Field(default_factory=utc_now)

    def payload_in(self, directory: Path, shown_dir: str | None) -> PayloadFile:
        """Write the payload's files into ``directory``; the payload as found there.

        A manifest names its parts as the sub-agent will see them: under ``shown_dir``
        (``/transcript`` in bubblewrap), else by their path in ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            if Path(name).name != name or name.startswith("."):
                raise ValueError(f"a payload file name that is a path: {name!r}")
            if self.payload.is_manifest and name == self.payload.path.name:
                text = relocate_manifest(text, shown_dir or str(directory.absolute()))
            (directory / name).write_text(text, encoding="utf-8")
        return self.payload.relocated(directory)


AnswerStatus = Literal["ran", "skipped", "failed"]


class JobAnswer(BaseModel):
    """What a worker sends back for one job's inputs."""

    format: int = JOB_FORMAT
    job_id: str
    input_id: str
    reflection_id: str
    agent_id: str
    worker: str = ""
    """The worker's name and host (``reflector-1@host``), for the logs."""
    version: str = ""
    """The agentd version the worker runs."""
    setup: str = ""
    """The digest of the worker's model setup for the job's model (a pause keeps it)."""
    status: AnswerStatus
    reason: str | None = None
    """Why it was skipped or failed (``configuration_error``, ``sandbox_unavailable``…)."""
    message: str = ""
    head: str | None = None
    """The commit its clone ended on when it committed anything (the bundle's one ref)."""
    commits: list[str] = Field(default_factory=list)
    """Every commit it made after the base, oldest first: exactly what the bundle holds."""
    uncommitted: list[str] = Field(default_factory=list)
    """Files its clone changed and did not commit."""
    transcript: list[str] = Field(default_factory=list)
    """The sub-agent's conversation, one ``messages.jsonl`` line each: what it read."""
    conversation_id: str | None = None
    error_code: str | None = None
    """The sub-agent's error when its run stopped on one (``provider_auth``, …)."""
    error_message: str | None = None
    bundle_bytes: int = 0
    started_at: datetime = Field(default_factory=utc_now)
    finished_at: datetime = Field(default_factory=utc_now)


def reflection_id_for(request: ReflectionRequest) -> str:
    """Stable per request: every copy of a job names its branch and checkout the same."""
    digest = hashlib.sha256(request.request_id.encode()).hexdigest()[:8]
    return f"{request.requested_at:%Y%m%d%H%M%S}-{digest}"


def stated_format(raw: str | bytes) -> int | None:
    """The ``format`` a JSON object says it has, read before the rest is trusted to parse
    (a newer side's fields may not); None when there is none."""
    try:
        found = json.loads(raw).get("format")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, int) else None
