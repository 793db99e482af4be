"""One writer per memory checkout: a turn's bash command and a reflection merge take turns.

Real git, a real bash process and the real memory lock. The steps are ordered by what
each side has visibly done (a file the command writes, the merge's descriptor on the
lock), never by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentd.jobs.checkout import Worktree, create_worktree
from agentd.jobs.finalize import finalize
from shared.agent.tools.base import MemoryEdit, ToolContext
from shared.agent.tools.bash import Bash
from shared.memory.repo import MemoryRepo
from tests.support.memory_lock import descriptors_on
from tests.support.waiting import ceiling, wait_for

HUMAN = "system/human.md"
GREEN_TEA = "---\nname: human\ndescription: What I know about the user.\n---\n- likes green tea\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def committing_as_the_agent(repo: MemoryRepo) -> MemoryEdit:
    """The daemon's memory edit: the memory lock for the body, then a commit."""

    @contextlib.asynccontextmanager
    async def edit(message: str) -> AsyncIterator[None]:
        async with repo.edit(message, author_name="a1", author_email="a1@agentd.local"):
            yield

    return edit


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "agents/a1/memory", agent_id="a1", agent_name="a1", persona="p", human="- tea"
    ) as repo:
        yield repo


@pytest.fixture
def reflection(parent: MemoryRepo, tmp_path: Path) -> Worktree:
    """A reflection job that has committed its work and is ready to finalize."""
    wt = create_worktree(
        parent.path, tmp_path / "agents/a1/reflections/worktrees", "job-1", author_email="r@x"
    )
    (wt.path / HUMAN).write_text(GREEN_TEA)
    git(wt.path, "commit", "-qam", "feat(reflection): remember green tea")
    return wt


def test_a_merge_waits_for_a_bash_command_writing_memory_and_both_land(
    parent: MemoryRepo, reflection: Worktree, tmp_path: Path
) -> None:
    workspace = tmp_path / "agents/a1/workspace"
    ctx = ToolContext(
        agent_id="a1",
        workspace=workspace,
        memory_dir=parent.path,
        memory_edit=committing_as_the_agent(parent),
    )
    started, go = workspace / "started", workspace / "go"
    workspace.mkdir(parents=True)
    # Made now, written later: in bubblewrap the workspace is an overlay, which need not
    # show a file created beside it while mounted, but reads an existing file afresh.
    go.touch()
    script = (
        'mkdir -p "$MEMORY_DIR/notes" && echo first > "$MEMORY_DIR/notes/bash.md"\n'
        'touch "$WORKSPACE/started"\n'
        'while [ ! -s "$WORKSPACE/go" ]; do sleep 0.02; done\n'
        'echo second >> "$MEMORY_DIR/notes/bash.md"\n'
    )
    outputs: list[str] = []
    command = threading.Thread(
        target=lambda: outputs.append(asyncio.run(Bash().run({"command": script}, ctx)))
    )
    command.start()
    try:
        wait_for(started.exists, "the command to write its first line")
        with ThreadPoolExecutor(1) as pool:
            merging = pool.submit(finalize, reflection, should_merge=True)
            wait_for(
                lambda: merging.done() or descriptors_on(parent.lock_path) == 2,
                "the merge to wait for the memory lock",
            )
            go.write_text("go\n")
            result = merging.result(timeout=ceiling(60))
    finally:
        go.write_text("go\n")
        command.join(ceiling(60))

    assert outputs == ["(no output)"]
    assert result.status == "merged"
    assert git(parent.path, "show", "HEAD:notes/bash.md") == "first\nsecond"
    assert git(parent.path, "show", f"HEAD:{HUMAN}") == GREEN_TEA.strip()
    assert git(parent.path, "status", "--porcelain") == ""
    subjects = git(parent.path, "log", "--first-parent", "--format=%s").splitlines()
    assert subjects[0].startswith("merge(reflection): ")
    assert subjects[1].startswith("bash: mkdir -p")
