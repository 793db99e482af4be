"""read_file, write_file and edit_file: numbered reads, atomic writes, exact edits, commits."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from shared.agent.tools import files
from shared.agent.tools.base import Tool, ToolContext
from shared.agent.tools.files import EditFile, ReadFile, WriteFile
from shared.errors import ToolError
from tests.agent.tools.conftest import commit_refused, memory_lock_never_free

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.agent.tools.conftest import RecordingMemoryEdit


def run(tool: Tool, ctx: ToolContext, **args: Any) -> str:
    return asyncio.run(tool.run(args, ctx))


# read_file


def test_read_numbers_lines_like_cat_n(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("alpha\nbeta\n")
    assert run(ReadFile(), ctx, path="a.txt") == "     1\talpha\n     2\tbeta"


def test_read_honours_offset_and_limit_and_says_where_to_go_on(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = run(ReadFile(), ctx, path="a.txt", offset=3, limit=2)
    assert out.splitlines() == [
        "     3\tline 3",
        "     4\tline 4",
        "[lines 3-4 of 10; use offset=5 to read on]",
    ]


def test_read_defaults_to_2000_lines(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x\n" * 2500)
    out = run(ReadFile(), ctx, path="a.txt").splitlines()
    assert out[-2] == "  2000\tx"
    assert "offset=2001" in out[-1]


def test_read_past_the_end_is_an_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("one\n")
    with pytest.raises(ToolError, match="past the end"):
        run(ReadFile(), ctx, path="a.txt", offset=5)


def test_read_of_an_empty_file_says_it_is_empty(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("")
    assert run(ReadFile(), ctx, path="a.txt").endswith("is empty")


def test_read_cuts_very_long_lines(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("y" * 5000)
    assert run(ReadFile(), ctx, path="a.txt").endswith("[line cut, 3000 more chars]")


def test_read_of_a_missing_file_is_an_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not found"):
        run(ReadFile(), ctx, path="nope.txt")


def test_read_of_a_directory_is_an_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="directory"):
        run(ReadFile(), ctx, path=".")


def test_read_of_a_binary_file_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "b.bin").write_bytes(b"abc\0def")
    with pytest.raises(ToolError, match="binary"):
        run(ReadFile(), ctx, path="b.bin")


def test_read_of_a_non_utf8_file_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(ToolError, match="not UTF-8"):
        run(ReadFile(), ctx, path="latin1.txt")


def test_read_of_a_file_over_10_mib_is_refused(ctx: ToolContext) -> None:
    with open(ctx.workspace / "big.txt", "wb") as f:
        f.truncate(10 * 1024 * 1024 + 1)
    with pytest.raises(ToolError, match="10 MiB"):
        run(ReadFile(), ctx, path="big.txt")


def test_read_of_another_agents_file_is_refused(ctx: ToolContext, home: Path) -> None:
    with pytest.raises(ToolError, match="read refused"):
        run(ReadFile(), ctx, path=str(home / "agents" / "a2" / "memory" / "secret.md"))


def test_read_of_a_host_file_is_refused(ctx: ToolContext, tmp_path: Path) -> None:
    (tmp_path / "host.txt").write_text("host secret\n")
    for outside in ("/etc/shadow", str(tmp_path / "host.txt")):
        with pytest.raises(ToolError, match="read refused"):
            run(ReadFile(), ctx, path=outside)


def test_read_through_a_hard_link_to_the_daemons_config_is_refused(
    ctx: ToolContext, home: Path
) -> None:
    os.link(home / "agentd.toml", ctx.workspace / "innocent.txt")
    with pytest.raises(ToolError, match="has 2 hard links") as err:
        run(ReadFile(), ctx, path="innocent.txt")
    assert "api_key" not in str(err.value)


def test_edit_through_a_hard_link_is_refused_and_changes_nothing(
    ctx: ToolContext, home: Path
) -> None:
    os.link(home / "agentd.toml", ctx.workspace / "innocent.txt")
    with pytest.raises(ToolError, match="hard links"):
        run(EditFile(), ctx, path="innocent.txt", old_string="'x'", new_string="'y'")
    assert (home / "agentd.toml").read_text() == "api_key = 'x'\n"


def test_read_through_a_symlink_to_the_daemons_config_is_refused(
    ctx: ToolContext, home: Path
) -> None:
    (ctx.workspace / "link.txt").symlink_to(home / "agentd.toml")
    with pytest.raises(ToolError, match="read refused"):
        run(ReadFile(), ctx, path="link.txt")


def swap_after_the_check(
    monkeypatch: pytest.MonkeyPatch, name: str, swap: Callable[[], None]
) -> None:
    """Make bash's move for it: right after the path guard passed, before the open."""
    guard = getattr(files, name)

    def checked_then_swapped(path: str, ctx: ToolContext) -> Path:
        real = guard(path, ctx)
        swap()
        return real

    monkeypatch.setattr(files, name, checked_then_swapped)


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed_by_reads(
    ctx: ToolContext, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = ctx.workspace / "sub"
    sub.mkdir()
    (sub / "agentd.toml").write_text("harmless\n")

    def swap() -> None:
        sub.rename(ctx.workspace / "sub.old")
        sub.symlink_to(home)

    swap_after_the_check(monkeypatch, "resolve_for_read", swap)
    with pytest.raises(ToolError, match="symlink") as err:
        run(ReadFile(), ctx, path="sub/agentd.toml")
    assert "api_key" not in str(err.value)


def test_a_file_swapped_for_a_symlink_after_the_check_is_not_followed(
    ctx: ToolContext, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ctx.workspace / "a.txt"
    target.write_text("harmless\n")

    def swap() -> None:
        target.unlink()
        target.symlink_to(home / "agentd.toml")

    swap_after_the_check(monkeypatch, "resolve_for_read", swap)
    with pytest.raises(ToolError, match="symlink"):
        run(ReadFile(), ctx, path="a.txt")


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed_by_writes(
    ctx: ToolContext, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = ctx.workspace / "sub"
    sub.mkdir()
    before = sorted(os.listdir(home))

    def swap() -> None:
        sub.rename(ctx.workspace / "sub.old")
        sub.symlink_to(home)

    swap_after_the_check(monkeypatch, "resolve_for_write", swap)
    with pytest.raises(ToolError, match="symlink"):
        run(WriteFile(), ctx, path="sub/planted.txt", content="x")
    assert sorted(os.listdir(home)) == before


def test_read_of_a_fifo_is_refused_instead_of_waiting_for_a_writer(ctx: ToolContext) -> None:
    os.mkfifo(ctx.workspace / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        run(ReadFile(), ctx, path="pipe")


def test_read_with_a_bad_limit_is_an_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("x\n")
    with pytest.raises(ToolError, match="limit"):
        run(ReadFile(), ctx, path="a.txt", limit=0)


# write_file


def test_write_creates_parents_and_reports_the_size(ctx: ToolContext) -> None:
    out = run(WriteFile(), ctx, path="deep/er/a.txt", content="héllo")
    target = ctx.workspace / "deep" / "er" / "a.txt"
    assert target.read_text() == "héllo"
    assert out == f"wrote 5 chars to {target}"


def test_write_replaces_atomically_and_leaves_no_temp_file(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ctx.workspace / "a.txt"
    target.write_text("old")
    target.chmod(0o640)
    replaced: list[tuple[str, str, dict[str, int]]] = []
    real_replace = os.replace

    def spy(src: str, dst: str, **dir_fds: int) -> None:
        replaced.append((src, dst, dir_fds))
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(os, "replace", spy)
    run(WriteFile(), ctx, path="a.txt", content="new")
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o640
    [(src, dst, dir_fds)] = replaced
    assert src.startswith(".a.txt.") and dst == "a.txt"
    assert dir_fds["src_dir_fd"] == dir_fds["dst_dir_fd"]
    assert os.listdir(ctx.workspace) == ["a.txt"]


def test_a_failed_write_keeps_the_old_file_and_cleans_up(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = ctx.workspace / "a.txt"
    target.write_text("old")

    def boom(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(ToolError, match="No space left"):
        run(WriteFile(), ctx, path="a.txt", content="new")
    assert target.read_text() == "old"
    assert os.listdir(ctx.workspace) == ["a.txt"]


def test_write_outside_own_directories_is_refused(ctx: ToolContext, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="write refused"):
        run(WriteFile(), ctx, path="../../../../x.txt", content="x")
    assert not (tmp_path / "x.txt").exists()


def test_write_into_memory_git_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"\.git"):
        run(WriteFile(), ctx, path=str(ctx.memory_dir / ".git" / "config"), content="x")


def test_write_of_a_new_memory_file_commits_it_as_created(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(WriteFile(), ctx, path=str(ctx.memory_dir / "people" / "ann.md"), content="Ann")
    [call] = recorder.calls
    assert call.message == "write_file: create people/ann.md"
    assert "people/ann.md" not in call.before
    assert call.after["people/ann.md"] == "Ann"


def test_write_of_an_existing_memory_file_commits_it_as_updated(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(WriteFile(), ctx, path=str(ctx.memory_dir / "notes.md"), content="new")
    assert recorder.messages == ["write_file: update notes.md"]


def test_write_in_the_workspace_does_not_touch_memory(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(WriteFile(), ctx, path="a.txt", content="x")
    assert recorder.calls == []


def test_write_to_memory_that_cannot_take_the_memory_lock_changes_nothing(
    make_ctx: Callable[..., ToolContext],
) -> None:
    ctx = make_ctx(memory_edit=memory_lock_never_free)
    target = ctx.memory_dir / "notes.md"
    with pytest.raises(ToolError, match=r"notes\.md was not changed: could not lock memory\.lock"):
        run(WriteFile(), ctx, path=str(target), content="new")
    assert target.read_text() == "remember\n"


def test_write_to_memory_whose_commit_is_refused_says_it_was_not_committed(
    make_ctx: Callable[..., ToolContext],
) -> None:
    ctx = make_ctx(memory_edit=commit_refused)
    target = ctx.memory_dir / "notes.md"
    with pytest.raises(ToolError, match=r"notes\.md was changed but not committed: memory is busy"):
        run(WriteFile(), ctx, path=str(target), content="new")
    assert target.read_text() == "new"


# edit_file


def test_edit_with_one_match_replaces_it(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x = 1\ny = 2\n")
    out = run(EditFile(), ctx, path="a.py", old_string="y = 2", new_string="y = 3")
    assert (ctx.workspace / "a.py").read_text() == "x = 1\ny = 3\n"
    assert out.endswith(": 1 replacement")


def test_edit_with_no_match_is_an_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x = 1\n")
    with pytest.raises(ToolError, match="old_string not found in"):
        run(EditFile(), ctx, path="a.py", old_string="x = 2", new_string="x = 3")


def test_edit_with_two_matches_is_an_error_naming_the_count(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times.*replace_all"):
        run(EditFile(), ctx, path="a.py", old_string="x = 1", new_string="x = 2")
    assert (ctx.workspace / "a.py").read_text() == "x = 1\nx = 1\n"


def test_edit_with_replace_all_replaces_every_match(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x = 1\nx = 1\nx = 1\n")
    out = run(EditFile(), ctx, path="a.py", old_string="1", new_string="2", replace_all=True)
    assert (ctx.workspace / "a.py").read_text() == "x = 2\nx = 2\nx = 2\n"
    assert out.endswith(": 3 replacements")


def test_edit_can_delete_text(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("keep drop")
    run(EditFile(), ctx, path="a.py", old_string=" drop", new_string="")
    assert (ctx.workspace / "a.py").read_text() == "keep"


def test_edit_with_identical_strings_is_an_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x")
    with pytest.raises(ToolError, match="same"):
        run(EditFile(), ctx, path="a.py", old_string="x", new_string="x")


def test_edit_with_an_empty_old_string_is_an_error(ctx: ToolContext) -> None:
    (ctx.workspace / "a.py").write_text("x")
    with pytest.raises(ToolError, match="old_string must not be empty"):
        run(EditFile(), ctx, path="a.py", old_string="", new_string="y")


def test_edit_of_a_missing_file_is_an_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not found"):
        run(EditFile(), ctx, path="nope.py", old_string="a", new_string="b")


def test_edit_of_a_memory_file_happens_inside_a_memory_edit(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(EditFile(), ctx, path=str(ctx.memory_dir / "notes.md"), old_string="re", new_string="")
    [call] = recorder.calls
    assert call.message == "edit_file: update notes.md"
    assert (call.before["notes.md"], call.after["notes.md"]) == ("remember\n", "member\n")


def test_edit_outside_own_directories_is_refused(ctx: ToolContext, home: Path) -> None:
    secret = home / "agents" / "a2" / "memory" / "secret.md"
    with pytest.raises(ToolError, match="write refused"):
        run(EditFile(), ctx, path=str(secret), old_string="secret", new_string="mine")
    assert secret.read_text() == "a2's secret\n"
