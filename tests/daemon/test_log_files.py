"""Each process writes its own log file: rotation under several writers loses no line and
mixes none.

The writers are the shape of a reflection worker: a process opens its log, then forks
(Celery's prefork child inherits the open handler), and both keep logging. Two such
processes run at once, with files rotating every few kilobytes.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

LINES = 600
_WRITER = f"""
import os, sys
from pathlib import Path
import structlog
import shared.logging as logging_setup

logging_setup.LOG_FILE_BYTES = 8_000
logging_setup.LOG_FILE_BACKUPS = 500
logging_setup.configure("reflector", console_format="json", log_dir=Path(sys.argv[1]))
log = structlog.get_logger("writer")
log.info("writer_started")
child = os.fork()
for n in range({LINES}):
    log.info("numbered", n=n, filler="x" * 120)
if child:
    os.waitpid(child, 0)
"""


def _records_by_file(log_dir: Path) -> dict[str, list[dict]]:
    """Each slot's lines, oldest backup first (``reflector-2.log.3`` … ``.1``, then the file)."""
    slots: dict[str, list[dict]] = {}
    for path in log_dir.glob("reflector*.log*"):
        base, _, backup = re.fullmatch(r"(.*?\.log)(\.(\d+))?", path.name).groups()  # type: ignore[union-attr]
        slots.setdefault(base, []).append((-int(backup or 0), path))  # type: ignore[arg-type]
    return {
        base: [
            json.loads(line) for _, path in sorted(files) for line in path.read_text().splitlines()
        ]
        for base, files in slots.items()
    }


def test_two_forking_writers_rotating_their_logs_keep_every_line_once_in_order(
    tmp_path: Path,
) -> None:
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    assert [writer.wait(ceiling(120)) for writer in writers] == [0, 0]

    numbered: dict[int, list[int]] = {}
    for base, records in _records_by_file(tmp_path).items():
        runs = [pid for pid, _ in itertools.groupby(r["pid"] for r in records)]
        assert len(runs) == len(set(runs)), f"{base} mixes the lines of {runs}"
        for record in records:
            if record["event"] == "numbered":
                numbered.setdefault(record["pid"], []).append(record["n"])
    assert len(numbered) == 4  # two parents, two forked children
    for pid, ns in numbered.items():
        assert ns == list(range(LINES)), f"pid {pid} lost or reordered lines"
