"""The README's OpenAI-compatible endpoint walkthrough, run as written: each ``$`` line in
a shell (curl, and Python with OpenAI's own client) against the real agentd on the mock
model serving the web view, its output compared with the lines the README shows under it.
The key, ids, times and the port differ from run to run: each is compared as its shape,
and the key and address the README names are swapped for this run's before a command
that names them runs."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.readme import console_steps, shaped, with_this_python_first
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

KEY = re.compile(r"agentd-[A-Za-z0-9_-]{43}")
ENDPOINT = re.compile(r"http://127\.0\.0\.1:\d+/v1")
VARYING = [
    (KEY, "<key>"),
    (ENDPOINT, "<endpoint>"),
    (re.compile(r"\bkey-[0-9A-Z]{26}\b"), "<key id>"),
    (re.compile(r'"created": \d+'), '"created": <time>'),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    return console_steps("## The OpenAI-compatible endpoint")


def shape(line: str) -> str:
    return shaped(line, VARYING)


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(AGENTD_WEB="127.0.0.1:0").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_endpoint_walkthrough_prints_what_it_shows(agentd: AgentdProcess) -> None:
    # The Quick start's first chat: the default agent, and what it was told.
    said = run_agentctl("chat", "-p", "我更喜欢用 tabs 缩进", env=agentd.env)
    assert said.returncode == 0, said.stderr
    env = with_this_python_first(agentd.env)
    steps = walkthrough()
    assert [command.split()[0] for command, _ in steps] == [
        "agentctl",
        "export",
        "curl",
        "python",
        "python",
        "agentctl",
        "curl",
    ]
    swaps: dict[str, str] = {}
    for command, shown in steps:
        for readme, real in swaps.items():
            command = command.replace(readme, real)
        if command.startswith("export "):
            env.update(word.split("=", 1) for word in shlex.split(command)[1:])
            assert shown == []
            continue
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=ceiling(120)
        )
        printed = done.stdout.splitlines() + done.stderr.splitlines()
        assert [shape(line) for line in printed] == [shape(line) for line in shown], command
        for readme_line, real_line in zip(shown, printed, strict=True):
            for pattern in (KEY, ENDPOINT):
                swaps.update(
                    zip(pattern.findall(readme_line), pattern.findall(real_line), strict=True)
                )
