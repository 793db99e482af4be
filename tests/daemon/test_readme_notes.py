"""The README's "Remember and forget" walkthrough, run as written: each ``$`` line in a
shell against the real agentd on the mock model in a fresh home, its output (stdout, then
stderr) compared with the lines the README shows under it. Shas and times differ from
run to run: each is compared as its shape, and a sha the README names is swapped for the
one this run made before the command that names it runs."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.processes import AgentdProcess
from tests.support.readme import TIME, console_steps, shaped, with_this_python_first
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

SHA = re.compile(r"\b[0-9a-f]{7}\b")
VARYING = [
    (TIME, "<time>"),
    (SHA, "<sha>"),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    return console_steps("### Remember and forget")


def shape(line: str) -> str:
    return shaped(line, VARYING)


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(TZ="Asia/Shanghai").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_remember_and_forget_walkthrough_prints_what_it_shows(
    agentd: AgentdProcess,
) -> None:
    env = with_this_python_first(agentd.env)
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
