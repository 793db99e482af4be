"""bash: runs in the workspace with a scrubbed environment, bounded in time and output."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from shared.agent.tools import bash
from shared.agent.tools.base import ToolContext
from shared.agent.tools.bash import Bash
from shared.errors import ToolError
from tests.agent.tools.conftest import commit_refused, memory_lock_never_free

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.agent.tools.conftest import RecordingMemoryEdit


def run(ctx: ToolContext, **args: Any) -> str:
    return asyncio.run(Bash().run(args, ctx))


def gone(pid: int) -> bool:
    """True once ``pid`` is dead (a zombie waiting for its reaper counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_bash_runs_in_the_workspace(ctx: ToolContext) -> None:
    assert run(ctx, command="pwd") == str(ctx.workspace)


def test_bash_creates_a_missing_workspace(make_ctx: Callable[..., ToolContext]) -> None:
    ctx = make_ctx(workspace=make_ctx().workspace / "fresh")
    assert run(ctx, command="pwd") == str(ctx.workspace)


def test_bash_interleaves_stderr_with_stdout(ctx: ToolContext) -> None:
    assert run(ctx, command="echo a; echo b >&2; echo c") == "a\nb\nc"


def test_bash_stdin_is_empty(ctx: ToolContext) -> None:
    assert run(ctx, command="cat; echo done") == "done"


def test_bash_shows_a_nonzero_exit_code(ctx: ToolContext) -> None:
    assert run(ctx, command="echo oops; exit 3") == "oops\n[exit code 3]"


def test_bash_says_when_there_is_no_output(ctx: ToolContext) -> None:
    assert run(ctx, command="true") == "(no output)"


def test_bash_env_is_scrubbed_of_secrets(
    make_ctx: Callable[..., ToolContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak")
    monkeypatch.setenv("MY_SECRET_TOKEN", "leak")
    monkeypatch.setenv("AGENTD_HOME", "/leak")
    monkeypatch.setenv("UNLISTED", "leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    ctx = make_ctx(extra_env={"PROJECT": "demo", "GITHUB_TOKEN": "leak"})
    env = dict(line.split("=", 1) for line in run(ctx, command="env").splitlines())
    assert "leak" not in "".join(env.values())
    assert not {"OPENAI_API_KEY", "MY_SECRET_TOKEN", "AGENTD_HOME", "GITHUB_TOKEN"} & set(env)
    assert env["MEMORY_DIR"] == str(ctx.memory_dir)
    assert env["WORKSPACE"] == str(ctx.workspace)
    assert env["AGENT_ID"] == "a1"
    assert env["PROJECT"] == "demo"
    assert env["LANG"] == "C.UTF-8"


def test_bash_timeout_kills_the_whole_group_and_says_so(
    make_ctx: Callable[..., ToolContext],
) -> None:
    ctx = make_ctx(bash_timeout_s=0.5)
    started = time.monotonic()
    out = run(ctx, command="sleep 30 & echo $!; echo partial; sleep 30; echo never")
    assert time.monotonic() - started < 5
    background_pid, rest = out.split("\n", 1)
    assert rest.startswith("partial\n[timed out after 0.5 s")
    assert "never" not in out
    assert gone(int(background_pid))


def test_bash_timeout_escalates_to_sigkill(
    make_ctx: Callable[..., ToolContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash, "KILL_GRACE_S", 0.3)
    ctx = make_ctx(bash_timeout_s=0.2)
    started = time.monotonic()
    out = run(ctx, command="trap '' TERM; sleep 30 & echo $!; wait; echo never")
    assert time.monotonic() - started < 3
    background_pid, rest = out.split("\n", 1)
    assert rest.startswith("[timed out after 0.2 s")
    assert gone(int(background_pid))


def test_the_model_may_shorten_the_timeout_but_not_exceed_ten_times_it(
    make_ctx: Callable[..., ToolContext],
) -> None:
    ctx = make_ctx(bash_timeout_s=0.05)
    assert "timed out after 0.5 s" in run(ctx, command="sleep 5", timeout_s=100)
    ctx = make_ctx(bash_timeout_s=30)
    assert "timed out after 0.2 s" in run(ctx, command="sleep 5", timeout_s=0.2)


def test_bash_rejects_a_bad_timeout(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="timeout_s"):
        run(ctx, command="true", timeout_s=-1)


def test_background_children_do_not_outlive_the_command(ctx: ToolContext) -> None:
    started = time.monotonic()
    out = run(ctx, command="sleep 30 & echo $!")
    assert time.monotonic() - started < 5
    assert gone(int(out))


def test_bash_output_cap_keeps_head_and_tail(make_ctx: Callable[..., ToolContext]) -> None:
    ctx = make_ctx(bash_output_chars=1000)
    out = run(ctx, command="seq 1 20000")
    head, rest = out.split("\n... [", 1)
    marker, tail = rest.split("\n", 1)
    assert head.startswith("1\n2\n3\n")
    assert tail.endswith("19999\n20000")
    total = len("".join(f"{i}\n" for i in range(1, 20001)))
    assert marker == f"{total - 1000} chars omitted] ..."
    assert len(head) + len(tail) + 1 == 1000


def test_bash_decodes_invalid_utf8_with_replacement(ctx: ToolContext) -> None:
    assert run(ctx, command=r"printf 'caf\xe9'") == "caf\ufffd"


def test_bash_runs_inside_the_memory_edit_that_commits_it(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(ctx, command='echo hello > "$MEMORY_DIR/new.md"')
    [call] = recorder.calls
    assert call.message == 'bash: echo hello > "$MEMORY_DIR/new.md"'
    assert "new.md" not in call.before
    assert call.after["new.md"] == "hello\n"


def test_bash_commit_message_is_cut_to_60_chars(
    ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    run(ctx, command="echo " + "x" * 100)
    assert recorder.messages == ["bash: echo " + "x" * 55]


def test_bash_commits_memory_after_a_timeout(
    make_ctx: Callable[..., ToolContext], recorder: RecordingMemoryEdit
) -> None:
    run(make_ctx(bash_timeout_s=0.2), command="sleep 5")
    assert recorder.messages == ["bash: sleep 5"]


def test_bash_that_cannot_take_the_memory_lock_does_not_run(
    make_ctx: Callable[..., ToolContext],
) -> None:
    ctx = make_ctx(memory_edit=memory_lock_never_free)
    with pytest.raises(ToolError, match=r"the command did not run: could not lock memory\.lock"):
        run(ctx, command='touch "$WORKSPACE/ran"')
    assert not (ctx.workspace / "ran").exists()


def test_bash_output_survives_a_refused_commit_which_it_reports(
    make_ctx: Callable[..., ToolContext],
) -> None:
    out = run(make_ctx(memory_edit=commit_refused), command="echo hi")
    assert out == (
        "hi\n[its changes to memory were not committed: memory is busy: git lock main.lock "
        "is held by a running git process]"
    )


def test_cancelling_bash_kills_the_process_group(ctx: ToolContext, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def cancel_midway() -> None:
        task = asyncio.create_task(
            Bash().run({"command": f"sleep 30 & echo $! > {pid_file}; wait"}, ctx)
        )
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(pid)


def test_bash_that_cannot_start_is_a_tool_error(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(os, "defpath", "/nonexistent")
    with pytest.raises(ToolError, match="cannot start bash"):
        run(ctx, command="true")


def test_bash_requires_a_command(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="command"):
        run(ctx, command="  ")


def test_bash_never_sees_os_environ_wholesale(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_DAEMON_SETTING", "x")
    assert "SOME_DAEMON_SETTING" not in run(ctx, command="env")
    assert os.environ["SOME_DAEMON_SETTING"] == "x"
