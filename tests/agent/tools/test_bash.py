"""bash: runs in the workspace with a scrubbed environment, bounded in time and output.

Whatever a command starts is gone when the call ends (normally, on a timeout, on a
cancel, even one landing while the process is being spawned): the tests find survivors
on the host by a marker in their command line, which works inside the sandbox's PID
namespace too (``$!`` there is not a host pid).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from shared.agent.tools import bash
from shared.agent.tools.base import ToolContext
from shared.agent.tools.bash import Bash
from shared.errors import ToolError
from tests.agent.tools.conftest import commit_refused, fake_no_bubblewrap, memory_lock_never_free
from tests.support.waiting import ceiling, wait_for, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.agent.tools.conftest import RecordingMemoryEdit

WAIT_S = 10.0
"""Bound on waiting for a process to die or a file to appear (not a timing assertion)."""


def run(ctx: ToolContext, **args: Any) -> str:
    return asyncio.run(Bash().run(args, ctx))


def sleeper() -> str:
    """A ``sleep`` duration unique to one test, so its processes can be found on the host."""
    return f"30.{secrets.randbelow(10**8):08d}"


def survivors(marker: str) -> list[int]:
    """Host pids of live (not zombie) processes whose command line holds ``marker``."""
    alive = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() not in (proc / "cmdline").read_bytes():
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(int(proc.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return alive


def survivors_after_a_while(marker: str) -> list[int]:
    """``survivors(marker)`` once they are gone, or whatever still lives after a ceiling
    of ``WAIT_S``."""
    deadline = time.monotonic() + ceiling(WAIT_S)
    while (alive := survivors(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


def wait_for_file(path: Path) -> None:
    wait_for(
        lambda: path.exists() and path.read_text().strip(),
        f"{path} to be written",
        timeout_s=WAIT_S,
    )


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
    shell_ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak")
    monkeypatch.setenv("MY_SECRET_TOKEN", "leak")
    monkeypatch.setenv("AGENTD_HOME", "/leak")
    monkeypatch.setenv("UNLISTED", "leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    ctx = replace(shell_ctx, extra_env={"PROJECT": "demo", "GITHUB_TOKEN": "leak"})
    env = dict(line.split("=", 1) for line in run(ctx, command="env").splitlines())
    assert "leak" not in "".join(env.values())
    assert not {"OPENAI_API_KEY", "MY_SECRET_TOKEN", "AGENTD_HOME", "GITHUB_TOKEN"} & set(env)
    assert env["MEMORY_DIR"] == str(ctx.memory_dir)
    assert env["WORKSPACE"] == str(ctx.workspace)
    assert env["AGENT_ID"] == "a1"
    assert env["PROJECT"] == "demo"
    assert env["LANG"] == "C.UTF-8"


def test_bash_timeout_kills_the_whole_group_and_says_so(shell_ctx: ToolContext) -> None:
    ctx = replace(shell_ctx, bash_timeout_s=1.0)
    marker = sleeper()
    out = run(ctx, command=f"sleep {marker} & echo partial; sleep {marker}; echo never")
    assert out == "partial\n[timed out after 1 s; the command and its children were killed]"
    assert survivors_after_a_while(marker) == []


def test_bash_timeout_escalates_to_sigkill(
    shell_ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bash, "KILL_GRACE_S", 0.3)
    ctx = replace(shell_ctx, bash_timeout_s=0.5)
    marker = sleeper()
    out = run(ctx, command=f"trap '' TERM; sleep {marker} & wait; echo never")
    assert out == "[timed out after 0.5 s; the command and its children were killed]"
    assert survivors_after_a_while(marker) == []


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


def test_background_children_do_not_outlive_the_command(shell_ctx: ToolContext) -> None:
    marker = sleeper()
    assert run(shell_ctx, command=f"sleep {marker} & echo started") == "started"
    assert survivors_after_a_while(marker) == []


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


def test_cancelling_bash_kills_the_process_group(shell_ctx: ToolContext) -> None:
    marker, ready = sleeper(), shell_ctx.workspace / "ready"

    async def cancel_midway() -> None:
        command = f"sleep {marker} & echo up > {ready}; wait"
        task = asyncio.create_task(Bash().run({"command": command}, shell_ctx))
        await wait_until(ready.exists, "the command to start")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert survivors_after_a_while(marker) == []


def test_a_cancel_landing_while_bash_is_spawned_leaves_no_process(
    shell_ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child runs, and has started a child of its own, before ``subprocess_exec``
    returns its pid: a cancel then must still kill the whole group (asyncio alone kills
    bash and orphans the ``sleep``)."""
    marker, ready = sleeper(), shell_ctx.workspace / "ready"

    async def cancel_during_spawn() -> None:
        command = f"sleep {marker} & echo up > {ready}; wait"
        task = asyncio.create_task(Bash().run({"command": command}, shell_ctx))

        def cancel_before_the_spawn_returns(_self: object, _transport: object) -> None:
            wait_for_file(ready)
            task.cancel()

        monkeypatch.setattr(bash._Protocol, "connection_made", cancel_before_the_spawn_returns)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_during_spawn())
    assert survivors_after_a_while(marker) == []


def test_without_bubblewrap_bash_refuses_to_run_unless_the_host_allowed_it(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_no_bubblewrap(monkeypatch)
    with pytest.raises(ToolError, match=r"bash is off: it runs only sandboxed, and sandbox off"):
        run(ctx, command='touch "$WORKSPACE/ran"')
    assert not (ctx.workspace / "ran").exists()


def test_bash_that_cannot_start_is_a_tool_error(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_no_bubblewrap(monkeypatch)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(os, "defpath", "/nonexistent")
    with pytest.raises(ToolError, match="cannot start bash"):
        run(replace(ctx, bash_unsandboxed=True), command="true")


def test_bash_requires_a_command(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="command"):
        run(ctx, command="  ")


def test_bash_never_sees_os_environ_wholesale(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_DAEMON_SETTING", "x")
    assert "SOME_DAEMON_SETTING" not in run(ctx, command="env")
    assert os.environ["SOME_DAEMON_SETTING"] == "x"
