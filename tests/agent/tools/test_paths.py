"""The path guard: real locations are checked, so ``..`` and symlinks cannot get around it,
and only the workspace and memory are reachable, for reads as for writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.agent.tools.base import ToolContext
from shared.agent.tools.paths import memory_relative, resolve_for_read, resolve_for_write
from shared.errors import ToolError


def test_relative_paths_resolve_against_the_workspace(ctx: ToolContext) -> None:
    assert resolve_for_write("sub/a.txt", ctx) == ctx.workspace / "sub" / "a.txt"
    assert resolve_for_read("a.txt", ctx) == ctx.workspace / "a.txt"


def test_tilde_expands_to_the_users_home(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(ctx.workspace))
    assert resolve_for_write("~/a.txt", ctx) == ctx.workspace / "a.txt"


def test_writes_inside_workspace_and_memory_are_allowed(ctx: ToolContext) -> None:
    assert resolve_for_write(str(ctx.memory_dir / "notes.md"), ctx) == ctx.memory_dir / "notes.md"
    assert resolve_for_write(str(ctx.workspace / "x" / "y"), ctx) == ctx.workspace / "x" / "y"


def test_dotdot_traversal_out_of_the_workspace_is_refused_for_writes(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="write refused") as err:
        resolve_for_write("../../x", ctx)
    assert str(ctx.workspace) in str(err.value)
    assert str(ctx.memory_dir) in str(err.value)


def test_an_absolute_path_elsewhere_is_refused_for_writes(ctx: ToolContext, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="outside your directories"):
        resolve_for_write(str(tmp_path / "elsewhere.txt"), ctx)
    with pytest.raises(ToolError):
        resolve_for_write("/etc/passwd", ctx)


def test_a_sibling_with_the_workspace_name_as_prefix_is_not_inside_it(ctx: ToolContext) -> None:
    with pytest.raises(ToolError):
        resolve_for_write(str(ctx.workspace) + "-evil/x", ctx)


def test_a_symlink_pointing_out_of_the_workspace_is_refused_for_writes(
    ctx: ToolContext, tmp_path: Path
) -> None:
    (ctx.workspace / "out").symlink_to(tmp_path)
    with pytest.raises(ToolError, match="write refused"):
        resolve_for_write("out/x.txt", ctx)


def test_a_dangling_symlink_pointing_out_is_refused_for_writes(
    ctx: ToolContext, tmp_path: Path
) -> None:
    (ctx.workspace / "link").symlink_to(tmp_path / "not-yet")
    with pytest.raises(ToolError):
        resolve_for_write("link", ctx)


def test_writes_into_the_memory_git_dir_are_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"\.git"):
        resolve_for_write(str(ctx.memory_dir / ".git" / "config"), ctx)
    with pytest.raises(ToolError, match=r"\.git"):
        resolve_for_write(str(ctx.memory_dir / ".." / "memory" / ".git" / "HEAD"), ctx)


def test_the_memory_git_dir_is_readable(ctx: ToolContext) -> None:
    config = ctx.memory_dir / ".git" / "config"
    assert resolve_for_read(str(config), ctx) == config


def test_reading_another_agents_directory_is_refused(ctx: ToolContext, home: Path) -> None:
    with pytest.raises(ToolError, match="read refused") as err:
        resolve_for_read(str(home / "agents" / "a2" / "memory" / "secret.md"), ctx)
    assert str(ctx.workspace) in str(err.value)


def test_reading_another_agents_directory_via_dotdot_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="read refused"):
        resolve_for_read("../../a2/memory/secret.md", ctx)


def test_reading_through_a_symlink_into_another_agent_is_refused(
    ctx: ToolContext, home: Path
) -> None:
    (ctx.workspace / "peek").symlink_to(home / "agents" / "a2")
    with pytest.raises(ToolError, match="read refused"):
        resolve_for_read("peek/memory/secret.md", ctx)


def test_reading_the_daemons_own_files_in_home_is_refused(ctx: ToolContext, home: Path) -> None:
    with pytest.raises(ToolError, match="read refused"):
        resolve_for_read(str(home / "agentd.toml"), ctx)


def test_reading_anything_outside_the_workspace_and_memory_is_refused(
    ctx: ToolContext, tmp_path: Path
) -> None:
    for outside in ("/etc/shadow", "/etc/passwd", str(tmp_path / "x.txt"), "~/.bashrc"):
        with pytest.raises(ToolError, match=r"read refused: .* is outside your directories"):
            resolve_for_read(outside, ctx)


def test_an_empty_path_is_an_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="empty"):
        resolve_for_read("", ctx)


def test_memory_relative_gives_the_repo_path_only_for_memory_files(ctx: ToolContext) -> None:
    assert memory_relative(ctx.memory_dir / "people" / "ann.md", ctx) == "people/ann.md"
    assert memory_relative(ctx.workspace / "a.txt", ctx) is None
