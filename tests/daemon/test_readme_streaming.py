"""The README's "Replies stream" walkthrough, run as written in a scratch directory against
the real agentd on the mock model: what a pipe gets is the text alone, and the log keeps
the reply whole. Times and ids are compared as their shape."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import AgentdProcess
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)"), "<time>"),
    (re.compile(r"\b[0-9A-HJKMNP-TV-Z]{8}\b"), "<id>"),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    text = README.read_text()
    section = text[text.index("### Replies stream") :]
    block = section[section.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def shape(line: str) -> str:
    for pattern, placeholder in VARYING:
        line = pattern.sub(placeholder, line)
    return line


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(TZ="Asia/Shanghai").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_streaming_walkthrough_prints_what_it_shows(
    agentd: AgentdProcess, tmp_path: Path
) -> None:
    env = {**agentd.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{agentd.env['PATH']}"}
    steps = walkthrough()
    assert [command.split()[:2] for command, _ in steps] == [
        ["agentctl", "chat"],
        ["cat", "reply.txt"],
        ["agentctl", "messages"],
    ]
    for command, shown in steps:
        done = subprocess.run(
            ["bash", "-c", command],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=ceiling(120),
        )
        printed = done.stdout.splitlines() + done.stderr.splitlines()
        assert [shape(line) for line in printed] == [shape(line) for line in shown], command
