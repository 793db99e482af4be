"""The README's "Replies stream" walkthrough, run as written in a scratch directory against
the real agentd on the mock model: what a pipe gets is the text alone, and the log keeps
the reply whole. Times and ids are compared as their shape."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import AgentdProcess
from tests.support.readme import TIME, console_steps, shaped, with_this_python_first
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

VARYING = [
    (TIME, "<time>"),
    (re.compile(r"\b[0-9A-HJKMNP-TV-Z]{8}\b"), "<id>"),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    return console_steps("### Replies stream")


def shape(line: str) -> str:
    return shaped(line, VARYING)


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(TZ="Asia/Shanghai").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_streaming_walkthrough_prints_what_it_shows(
    agentd: AgentdProcess, tmp_path: Path
) -> None:
    env = with_this_python_first(agentd.env)
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
