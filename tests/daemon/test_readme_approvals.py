"""The README's "Approvals" walkthrough, run as written: each ``$`` line in a shell against
the real agentd on the mock model, its output (stdout, then stderr) compared with the
lines the README shows under it. Ids, times and conversation ids differ from run to run:
each is compared as its shape, and an id the README names is swapped for the one this
run made before the command that names it runs."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.readme import TIME, console_steps, shaped, with_this_python_first
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

ID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{8}\b")
"""A short id (of an approval, a turn): eight of ULID's Crockford base32 characters."""
VARYING = [
    (TIME, "<time>"),
    (re.compile(r"\bconv-[0-9A-Z]{26}\b"), "<conversation>"),
    (ID, "<id>"),
]


def walkthrough() -> list[tuple[str, list[str]]]:
    return console_steps("### Approvals")


def shape(line: str) -> str:
    return shaped(line, VARYING)


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(TZ="Asia/Shanghai").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_approvals_walkthrough_prints_what_it_shows(agentd: AgentdProcess) -> None:
    assert run_agentctl("agents", "show", env=agentd.env).returncode == 0  # the default agent
    env = with_this_python_first(agentd.env)
    steps = walkthrough()
    assert [command.split()[:2] for command, _ in steps] == [
        ["agentctl", "agents"],
        ["agentctl", "chat"],
        ["echo", "$?"],
        ["agentctl", "approvals"],
        ["agentctl", "chat"],
        ["agentctl", "approve"],
        ["agentctl", "chat"],
        ["agentctl", "deny"],
    ]
    ids: dict[str, str] = {}
    status = 0
    for command, shown in steps:
        if command == "echo $?":
            assert shown == [str(status)]
            continue
        for readme_id, real in ids.items():
            command = command.replace(readme_id, real)
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=ceiling(120)
        )
        status = done.returncode
        printed = done.stdout.splitlines() + done.stderr.splitlines()
        assert [shape(line) for line in printed] == [shape(line) for line in shown], command
        for said, real_line in zip(shown, printed, strict=True):
            ids.update(zip(ID.findall(said), ID.findall(real_line), strict=True))
    assert (
        run_agentctl("approvals", env=agentd.env).stderr == "no tool call waits for your approval\n"
    )
