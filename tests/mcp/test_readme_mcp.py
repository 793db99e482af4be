"""The README's "An MCP server" walkthrough, run as written: its Python block (the SDK's
own client starting ``agentctl mcp`` from ``PATH``) against the real agentd on the mock
model, holding the quick start's ``default`` agent, then the ``$`` line after it; what
they print is compared with the lines the README shows, ids, shas and times aside."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)"), "<time>"),
    (re.compile(r"\bagent-[0-9A-Z]{26}\b"), "<agent>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<commit>"),
    (re.compile(r"\b[0-9a-f]{7}\b"), "<sha>"),
]


def section() -> str:
    text = README.read_text()
    start = text.index("## An MCP server")
    return text[start : text.index("\n## ", start + 1)]


def fenced(text: str, language: str) -> str:
    opening = f"```{language}\n"
    block = text[text.index(opening) + len(opening) :]
    return block[: block.index("```")]


def shape(line: str) -> str:
    for pattern, placeholder in VARYING:
        line = pattern.sub(placeholder, line)
    return line


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    process = AgentdProcess(TZ="Asia/Shanghai").start(timeout_s=120)
    yield process
    process.stop()


def test_the_readme_mcp_walkthrough_prints_what_it_shows(
    agentd: AgentdProcess, tmp_path: Path
) -> None:
    assert run_agentctl("agents", "show", env=agentd.env).returncode == 0  # the default agent
    env = {**agentd.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{agentd.env['PATH']}"}
    text = section()
    script = tmp_path / "client.py"
    script.write_text(fenced(text, "python"))
    shown = fenced(text, "console").splitlines()
    command_at = next(n for n, line in enumerate(shown) if line.startswith("$ "))

    client = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=ceiling(120)
    )

    assert client.returncode == 0, client.stderr
    printed = client.stdout.splitlines()
    assert [shape(line) for line in printed] == [shape(line) for line in shown[:command_at]]
    command = shown[command_at].removeprefix("$ ")
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=ceiling(120)
    )
    assert done.returncode == 0, done.stderr
    expected = shown[command_at + 1 :]
    assert [shape(line) for line in done.stdout.splitlines()] == [shape(x) for x in expected]
