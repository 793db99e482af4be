"""The bash tool: the model's general-purpose hands, fenced in space, time, output and env.

Space: where bubblewrap works, every command runs inside it (:mod:`shared.sandbox`) and
sees the agent's workspace and memory checkout as ``/workspace`` and ``/memory`` (the
names its system prompt uses; writable; the checkout's ``.git`` read-only, so no hook,
config or ref can be planted for the harness's git), no host path of them, a minimal
read-only system, a ``/proc`` of its own PID namespace and a private ``/tmp``; no network
unless ``AGENTD_TOOL_NETWORK=1``. ``$AGENTD_HOME``, other agents, the daemon's processes
and ``/etc/shadow`` are simply not there. Without bubblewrap a command runs only where the
host opted in (``ctx.bash_unsandboxed``); otherwise the daemon does not offer bash at all
(:func:`shared.agent.tools.registry.agent_shell`).

Time: a command gets its own session (process group) so a timeout, a cancelled turn, or
the end of the command can stop everything it started, background children included. It
is spawned inside that guard: a cancel landing while the process starts lets the start
finish and then kills the group, so nothing is orphaned.

Environment: built from an allowlist, never inherited, so no provider key or secret
reaches the command even unsandboxed. Output is capped (head and tail kept) so one noisy
command cannot flood the context.

Bash may change memory files, so the command runs holding the agent's memory lock and
whatever it changed there is committed when it ends, under the same lock: the checkout
has one writer, and a reflection merge never runs while a command is halfway through
its edits (the merge waits for the lock). What memory may not hold (a nested git
repository, a file over a size limit) is taken out before that commit and the result
ends with the typed error naming it (:mod:`shared.memory.screen`); the rest is committed.
A private worktree per command would not do: the model knows the checkout by the name the
system prompt gives it and writes there.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Annotated

from pydantic import Field

from shared import sandbox
from shared.agent.tools.args import NonBlankStr, ToolArgs
from shared.agent.tools.base import Tool, ToolContext
from shared.errors import LockTimeout, MemoryContentError, MemoryRepoError, ToolError
from shared.sandbox import Bind, Walls

MAX_TIMEOUT_S = 600.0
TIMEOUT_FACTOR = 10
"""The model may ask for up to this many times the configured timeout (within the max)."""
KILL_GRACE_S = 2.0
"""Between SIGTERM and SIGKILL of a process group."""
DRAIN_GRACE_S = 1.0
"""How long to wait for the output pipe to close once the group is gone."""

ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
)
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
SECRET_NAME_PREFIXES = ("AWS_", "AGENTD_", "OPENAI", "ANTHROPIC")
SANDBOX_OWN = ("PATH", "TMPDIR")
"""Set by the sandbox itself; the host's values name paths that are not there inside."""
PROC = Path("/proc")


class Bash(Tool):
    name = "bash"
    description = "Run bash in your workspace; returns the output. Background jobs are killed."

    class Args(ToolArgs):
        command: NonBlankStr
        timeout_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        command = args.command
        timeout = _timeout(args.timeout_s, ctx.bash_timeout_s)
        try:
            ctx.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ToolError(f"cannot create workspace {ctx.workspace}: {e.strerror}") from None
        # Off the loop: the first sandboxed command on a filesystem checks staging there.
        argv, env, walls = await asyncio.to_thread(self._launch, command, ctx)
        ran: tuple[_Output, int, bool] | None = None
        not_committed = ""
        try:
            async with ctx.memory_edit(f"bash: {' '.join(command.split())[:60]}"):
                try:
                    ran = await _run(argv, env, ctx, timeout)
                finally:
                    if walls is not None:
                        sandbox.clear_scratch(walls)
        except MemoryContentError as exc:
            not_committed = f"\n[{exc.code}: {exc.message}]"
        except (LockTimeout, MemoryRepoError) as exc:
            if ran is None:
                raise ToolError(f"the command did not run: {exc.message}") from None
            not_committed = f"\n[its changes to memory were not committed: {exc.message}]"
        assert ran is not None
        output, returncode, timed_out = ran
        return _report(output.render(), returncode, timed_out, timeout) + not_committed

    def walls(self, ctx: ToolContext) -> Walls:
        """What a sandboxed command may see besides the minimal system, by the names the
        model knows (``/workspace``, ``/memory``).

        The workspace and the memory checkout are writable; the checkout's ``.git`` stays
        read-only, since the harness commits after the command and must find no planted
        hook, config or moved ref. A subclass with other walls (the reflection
        sub-agent's bash) overrides this; the timeout, output cap and process-group
        cleanup stay one implementation.
        """
        names = ctx.names()
        binds = [Bind(ctx.workspace, names.inside(ctx.workspace), writable=True)]
        if ctx.memory_dir != ctx.workspace and ctx.memory_dir.is_dir():
            binds.append(Bind(ctx.memory_dir, names.inside(ctx.memory_dir), writable=True))
        git_dir = ctx.memory_dir / ".git"
        binds.append(Bind(git_dir, names.inside(git_dir)))
        return Walls(cwd=names.inside(ctx.workspace), binds=tuple(binds), network=ctx.bash_network)

    def _launch(
        self, command: str, ctx: ToolContext
    ) -> tuple[list[str], dict[str, str], Walls | None]:
        """The argv and environment to start the command with, and the walls it runs in:
        bubblewrap around bash when it works here, bare bash only where the host allowed
        it, else a refusal."""
        env = scrubbed_env(ctx)
        if sandbox.available():
            inside = {name: value for name, value in env.items() if name not in SANDBOX_OWN}
            inside["HOME"] = ctx.names().inside(ctx.workspace)
            walls = self.walls(ctx)
            argv = sandbox.command_argv(walls, inside, ["bash", "-c", command])
            return argv, sandbox.launch_env(inside), walls
        if not ctx.bash_unsandboxed:
            raise ToolError(
                f"bash is off: it runs only sandboxed, and {sandbox.reason()}; ask the user "
                "to install bubblewrap (or to set AGENTD_UNSANDBOXED_BASH=1)"
            )
        return ["bash", "-c", command], env, None


def scrubbed_env(ctx: ToolContext) -> dict[str, str]:
    """The command's environment: allowlisted variables, ``extra_env``, the agent's paths."""
    env = {name: os.environ[name] for name in ENV_ALLOWLIST if name in os.environ}
    env.update(ctx.extra_env)
    names = ctx.names()
    env.update(
        WORKSPACE=names.inside(ctx.workspace),
        MEMORY_DIR=names.inside(ctx.memory_dir),
        AGENT_ID=ctx.agent_id,
    )
    return {name: value for name, value in env.items() if not _looks_secret(name)}


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS) or upper.startswith(
        SECRET_NAME_PREFIXES
    )


def _timeout(requested: float | None, default: float) -> float:
    ceiling = min(default * TIMEOUT_FACTOR, MAX_TIMEOUT_S)
    return min(default if requested is None else requested, ceiling)


class _Output:
    """Decoded output keeping only the first and last ``limit / 2`` chars, and a count."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self._total = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self._total += len(text)
        room = self._head_limit - len(self._head)
        self._head += text[:room]
        if len(text) > room:
            tail = self._tail + text[room:]
            self._tail = tail[max(len(tail) - self._tail_limit, 0) :]

    def render(self) -> str:
        omitted = self._total - len(self._head) - len(self._tail)
        if omitted <= 0:
            return self._head + self._tail
        return f"{self._head}\n... [{omitted} chars omitted] ...\n{self._tail}"


class _Protocol(asyncio.SubprocessProtocol):
    """Feeds output as it arrives; tells apart "bash exited" from "every pipe closed".

    The two differ when a background child still holds the output pipe, and
    ``Process.wait()`` waits for both, so it cannot tell us when to stop the group.
    """

    def __init__(self, output: _Output) -> None:
        loop = asyncio.get_running_loop()
        self.output = output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.output.feed(data)

    def process_exited(self) -> None:
        self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set_result(None)


async def _run(
    argv: list[str], env: dict[str, str], ctx: ToolContext, timeout: float
) -> tuple[_Output, int, bool]:
    """Run ``argv``; return its output, exit status, and whether it timed out."""
    output = _Output(ctx.bash_output_chars)
    spawning = asyncio.ensure_future(_spawn(argv, env, ctx.workspace, output))
    try:
        transport, protocol = await asyncio.shield(spawning)
    except asyncio.CancelledError:
        await _kill_once_spawned(spawning)
        raise
    pgid = transport.get_pid()
    try:
        try:
            await asyncio.wait_for(asyncio.shield(protocol.exited), timeout)
            timed_out = False
        except TimeoutError:
            timed_out = True
        await _stop_group(pgid)
        await protocol.exited
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(protocol.closed), DRAIN_GRACE_S)
    except asyncio.CancelledError:
        await _kill_group(pgid, protocol)
        raise
    finally:
        transport.close()
    output.feed(b"", final=True)
    returncode = transport.get_returncode()
    assert returncode is not None
    return output, returncode, timed_out


_Spawned = tuple[asyncio.SubprocessTransport, _Protocol]


async def _spawn(argv: list[str], env: dict[str, str], cwd: Path, output: _Output) -> _Spawned:
    try:
        return await asyncio.get_running_loop().subprocess_exec(
            lambda: _Protocol(output),
            *argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"cannot start bash: {e.strerror or e}") from None


async def _kill_once_spawned(spawning: asyncio.Future[_Spawned]) -> None:
    """A cancel landed while the process was starting: the child may already run (and
    have started others), but its pid is known only once the start completes. Let it
    complete (milliseconds; cancelled, asyncio would kill bash alone and orphan its
    children), then kill the whole group."""
    while not spawning.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([spawning])
    if spawning.cancelled() or spawning.exception() is not None:
        return
    transport, protocol = spawning.result()
    try:
        await _kill_group(transport.get_pid(), protocol)
    finally:
        transport.close()


async def _kill_group(pgid: int, protocol: _Protocol) -> None:
    """SIGKILL the group at once (the turn is being cancelled) and reap its leader, so no
    zombie is left behind."""
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(protocol.exited), KILL_GRACE_S)


async def _stop_group(pgid: int) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after ``KILL_GRACE_S``."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KILL_GRACE_S
    while loop.time() < deadline:
        await asyncio.sleep(0.05)
        if not _group_alive(pgid):
            return
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; ``False`` if it has no process we may signal."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs.

    Killed orphans stay zombies until init reaps them, which some container inits do
    slowly; they still count for ``killpg``, so on Linux ``/proc`` tells them apart.
    """
    if not _signal_group(pgid, 0):
        return False
    if not PROC.is_dir():
        return True
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if state != "Z" and int(pgrp) == pgid:
            return True
    return False


def _report(text: str, returncode: int, timed_out: bool, timeout: float) -> str:
    lines = [text.removesuffix("\n")] if text else []
    if timed_out:
        lines.append(f"[timed out after {timeout:g} s; the command and its children were killed]")
    elif returncode != 0:
        lines.append(f"[exit code {returncode}]")
    return "\n".join(lines) or "(no output)"
