"""The names a model knows its directories by, and the file tools taking them.

In bubblewrap the agent's workspace is ``/workspace`` and its memory ``/memory``; the file
tools run outside on host paths, take those names, keep refusing everything else, and
never print a host path back. Where bash runs bare the names are the host paths.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from shared.agent.tools.base import ToolContext
from shared.agent.tools.files import EditFile, ReadFile, WriteFile
from shared.agent.tools.view import MEMORY, WORKSPACE, PathView
from shared.errors import ToolError


@pytest.fixture
def neutral(ctx: ToolContext) -> ToolContext:
    """``ctx`` as where bash runs in bubblewrap."""
    view = PathView.of((WORKSPACE, ctx.workspace), (MEMORY, ctx.memory_dir), sandboxed=True)
    return replace(ctx, view=view)


def run(tool: ReadFile | WriteFile | EditFile, ctx: ToolContext, **args: str) -> str:
    return asyncio.run(tool.run(args, ctx))


def refusal(tool: ReadFile | WriteFile | EditFile, ctx: ToolContext, **args: str) -> str:
    with pytest.raises(ToolError) as refused:
        run(tool, ctx, **args)
    return str(refused.value)


def test_the_view_maps_each_name_to_its_host_directory_and_back(neutral: ToolContext) -> None:
    view = neutral.names()
    memory, workspace = neutral.memory_dir, neutral.workspace
    assert view.host("/memory/notes.md", workspace) == memory / "notes.md"
    assert view.host("/memory", workspace) == memory
    assert view.host("a/b.txt", workspace) == workspace / "a" / "b.txt"
    assert view.host("~/b.txt", workspace) == workspace / "b.txt"
    assert view.host("../memory/notes.md", workspace) == memory / "notes.md"
    assert view.host("//memory/./x/../notes.md", workspace) == memory / "notes.md"
    assert view.inside(memory / "system" / "human.md") == "/memory/system/human.md"
    assert view.inside(workspace) == "/workspace"


def test_a_name_no_place_holds_has_no_host_path(neutral: ToolContext, home: Path) -> None:
    """Not even the host path of the agent's own memory: the model is never told it, and
    an answer to a guess would tell it where the home is."""
    view = neutral.names()
    for outside in ("/etc/passwd", "/", "/memory-evil/x", "/workspace/../../x", "../../x"):
        assert view.host(outside, neutral.workspace) is None, outside
    assert view.host(str(neutral.memory_dir / "notes.md"), neutral.workspace) is None
    assert view.host(str(home / "agentd.toml"), neutral.workspace) is None


def test_scrub_replaces_every_host_path_of_a_place_by_its_name(neutral: ToolContext) -> None:
    message = f"git commit failed in {neutral.memory_dir}: cannot lock {neutral.workspace}/x"
    assert (
        neutral.names().scrub(message) == "git commit failed in /memory: cannot lock /workspace/x"
    )
    assert PathView().scrub(message) == message


def test_where_bash_runs_bare_every_name_is_the_host_path(ctx: ToolContext) -> None:
    view = PathView.of((WORKSPACE, ctx.workspace), (MEMORY, ctx.memory_dir), sandboxed=False)
    assert view == PathView()
    assert view.inside(ctx.memory_dir) == str(ctx.memory_dir)
    assert view.host(str(ctx.memory_dir / "notes.md"), ctx.workspace) == ctx.memory_dir / "notes.md"
    assert view.host("/memory/notes.md", ctx.workspace) == Path("/memory/notes.md")


def test_the_file_tools_take_the_neutral_names_and_answer_with_them(
    neutral: ToolContext, home: Path
) -> None:
    assert run(ReadFile(), neutral, path="/memory/notes.md").endswith("\tremember")
    written = run(WriteFile(), neutral, path="/workspace/out.txt", content="x\n")
    assert written == "wrote 2 chars to /workspace/out.txt"
    assert (neutral.workspace / "out.txt").read_text() == "x\n"
    edited = run(
        EditFile(), neutral, path="/memory/notes.md", old_string="remember", new_string="y"
    )
    assert edited == "edited /memory/notes.md: 1 replacement"
    assert (neutral.memory_dir / "notes.md").read_text() == "y\n"
    spelled = str(neutral.memory_dir / "notes.md")  # a host path the model was never told
    messages = [
        refusal(ReadFile(), neutral, path="/memory/missing.md"),
        refusal(ReadFile(), neutral, path="/memory"),
        refusal(EditFile(), neutral, path="/memory/notes.md", old_string="zzz", new_string="q"),
        refusal(WriteFile(), neutral, path="/memory/.git/config", content="x"),
        refusal(ReadFile(), neutral, path="/etc/passwd"),
    ]
    assert messages[0] == "file not found: /memory/missing.md"
    assert messages[1].startswith("/memory is a directory")
    assert messages[2].startswith("old_string not found in /memory/notes.md")
    assert messages[3].startswith("write refused: /memory/.git/config is inside")
    assert "your workspace /workspace and memory /memory" in messages[4]
    assert not [message for message in messages if str(home) in message]
    assert refusal(ReadFile(), neutral, path=spelled).startswith(f"read refused: {spelled} is out")


def test_a_link_in_memory_to_a_neutral_name_is_not_followed_on_the_host(
    neutral: ToolContext,
) -> None:
    """An absolute link the model made in its sandbox (``/memory/...``) means another
    place on the host: the file tools refuse it rather than guess."""
    (neutral.memory_dir / "alias.md").symlink_to(PurePosixPath("/memory/notes.md"))
    assert "read refused: /memory/alias.md" in refusal(ReadFile(), neutral, path="/memory/alias.md")
