"""The README's console walkthroughs, read as tests run them: each ``$`` line with the lines
the README shows under it, and the shape of a line whose ids and times differ per run."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)")
"""A time as agentctl prints it (ISO 8601 with its offset)."""

Varying = list[tuple[re.Pattern[str], str]]


def console_steps(heading: str) -> list[tuple[str, list[str]]]:
    """The commands of the first ``console`` block after ``heading``, each with its output."""
    text = README.read_text()
    section = text[text.index(heading) :]
    block = section[section.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def shaped(line: str, varying: Varying) -> str:
    """``line`` with each varying part replaced by its placeholder."""
    for pattern, placeholder in varying:
        line = pattern.sub(placeholder, line)
    return line


def with_this_python_first(env: dict[str, str]) -> dict[str, str]:
    """``env`` whose PATH finds this virtualenv's agentctl and python first, as a user who
    activated it does."""
    return {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
