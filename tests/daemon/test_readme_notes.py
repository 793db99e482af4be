"""The README's "Remember and forget" walkthrough, run as written: each ``$`` line in a
shell against the real agentd on the mock model in a fresh home, its output (stdout, then
stderr) compared with the lines the README shows under it. Shas and times differ from
run to run: each is compared as its shape, and a sha the README names is swapped for the
one this run made before the command that names it runs."""

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
SHA = re.compile(r"\b[0-9a-f]{7}\b")
VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)"), "<time>"),
    (SHA, "<sha>"),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    """The commands of the section's console block, each with its output."""
    text = README.read_text()
    section = text[text.index("### Remember and forget") :]
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


def test_the_readme_remember_and_forget_walkthrough_prints_what_it_shows(
    agentd: AgentdProcess,
) -> None:
    env = {**agentd.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{agentd.env['PATH']}"}
    steps = walkthrough()
    assert [command.split()[:2] for command, _ in steps] == [
        ["agentctl", "chat"],
        ["agentctl", "remember"],
        ["agentctl", "chat"],
        ["agentctl", "memory"],
        ["agentctl", "forget"],
        ["agentctl", "memory"],
        ["agentctl", "memory"],
    ]
    shas: dict[str, str] = {}
    for command, shown in steps:
        for readme_sha, real in shas.items():
            command = command.replace(readme_sha, real)
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=ceiling(120)
        )
        assert done.returncode == 0, (command, done.stderr)
        printed = done.stdout.splitlines() + done.stderr.splitlines()
        assert [shape(line) for line in printed] == [shape(line) for line in shown], command
        for said, real_line in zip(shown, printed, strict=True):
            shas.update(zip(SHA.findall(said), SHA.findall(real_line), strict=True))
