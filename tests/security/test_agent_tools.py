"""The main agent attacks its host through its own tools, and nothing leaves or changes.

Each attack runs through the real ``bash`` tool in a real bubblewrap sandbox (and once
through the daemon's own turn), with a canary provider key in the environment and in
``agentd.toml``, another agent's transcript beside it, a loopback listener waiting for a
call home, and a process standing in for the daemon. What must hold afterwards: no canary
and no other agent's words in anything the model saw, no connection, no process killed,
and not one byte of the home outside the workspace changed (the memory repo's ``.git``
included, so no hook, config or ref was planted). The file tools are tried on the same
targets, through a symlink ``bash`` made and a hard link. Where bubblewrap does not work
the sandbox tests skip and the refusal path is tested: no ``bash`` in the model's tools
unless the host opted in, and then the start-up log and ``agentd doctor`` say so.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from agentd.stack.doctor import check_agent_bash
from shared import sandbox
from shared.agent.tools.base import Tool, ToolContext
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import ReadFile
from shared.errors import ToolError
from shared.memory import git
from shared.memory.repo import MemoryRepo
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.settings import Settings
from tests.agent.tools.conftest import fake_no_bubblewrap
from tests.security.walls import CANARY_KEY, Listener, changed, fingerprint
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess

needs_bubblewrap = pytest.mark.skipif(
    not sandbox.available(),
    reason=f"bubblewrap unusable here, sandbox not tested: {sandbox.reason()}",
)
OTHER_AGENTS_WORDS = "a2-private-transcript"


class Host:
    """A home with agent a1 (workspace, real memory repo) and a2, the daemon's config with a
    key, a listener, and a process standing in for the daemon."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.workspace = home / "agents/a1/workspace"
        self.workspace.mkdir(parents=True)
        self.memory = home / "agents/a1/memory"
        MemoryRepo.create(self.memory, agent_id="a1", agent_name="Ada", persona="p", human="- x")
        transcript = home / "agents/a2/conversations/c1/messages.jsonl"
        transcript.parent.mkdir(parents=True)
        transcript.write_text(f'{{"content": "{OTHER_AGENTS_WORDS}"}}\n')
        self.config = home / "agentd.toml"
        self.config.write_text(f'api_key = "{CANARY_KEY}"\n')
        self.listener = Listener()
        self.daemon_stand_in = subprocess.Popen(["sleep", "600"])
        self.ctx = ToolContext(
            agent_id="a1",
            workspace=self.workspace,
            memory_dir=self.memory,
            bash_timeout_s=20,
            extra_env={"AGENTD_HOME": str(home)},
        )

    def bash(self, command: str, ctx: ToolContext | None = None) -> str:
        return asyncio.run(Bash().run({"command": command}, ctx or self.ctx))

    def outside_the_workspace(self) -> dict[str, str]:
        return fingerprint(self.home, skip=[self.workspace])

    def refs(self) -> str:
        return git.run(self.memory, "for-each-ref", "--format=%(refname) %(objectname)").stdout

    def close(self) -> None:
        self.listener.close()
        self.daemon_stand_in.kill()
        self.daemon_stand_in.wait()


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    """Outside ``/tmp`` (the daemon test below has its home under it)."""
    home = Path(tempfile.mkdtemp(prefix="agentd-agent-walls-", dir="/var/tmp"))
    host = Host(home)
    yield host
    host.close()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def canary_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    monkeypatch.setenv("AGENTD_API_KEY", CANARY_KEY)


@needs_bubblewrap
def test_bash_sees_no_key_no_other_agent_and_no_host_secret(host: Host) -> None:
    out = host.bash(
        "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < /proc/1/environ; "
        "grep -a -l sk-canary /proc/[0-9]*/environ /proc/[0-9]*/cmdline; env; "
        f"echo pid1: $(head -c 5 /proc/1/cmdline); ls /proc/{os.getpid()} && echo SEEN; "
        f"cat {host.config} $AGENTD_HOME/agentd.toml; "
        f"cat {host.home}/agents/a2/conversations/c1/messages.jsonl; "
        f"ls {host.home} {host.home}/agents /root /home; cat /etc/shadow; "
        'grep -r -l sk-canary /etc /tmp /var /root "$HOME" 2>/dev/null; '
        "echo end"
    )
    assert out.rstrip().endswith("end")
    assert CANARY_KEY not in out
    assert OTHER_AGENTS_WORDS not in out and "root:" not in out
    assert f"cat: {host.config}: No such file or directory" in out
    assert "pid1: bwrap" in out and "SEEN" not in out, "a PID namespace of its own"


@needs_bubblewrap
def test_bash_writes_nothing_outside_its_workspace_and_moves_no_ref(host: Host) -> None:
    before, refs = host.outside_the_workspace(), host.refs()
    host_tmp = Path("/tmp") / f"agentd-planted-{secrets.token_hex(4)}"
    git_dir, memory = "$MEMORY_DIR/.git", "$MEMORY_DIR"  # what the model knows them by
    out = host.bash(
        f"echo x > {host.home}/planted; echo x > {host.home}/agents/a2/planted; "
        f"echo x > {host_tmp}; "
        f"printf '#!/bin/sh\\necho pwned\\n' > {git_dir}/hooks/post-commit; "
        f"chmod +x {git_dir}/hooks/pre-commit; "
        f"git -C {memory} config core.fsmonitor 'touch /tmp/pwned'; "
        f"printf '[core]\\n\\thooksPath = /tmp\\n' >> {git_dir}/config; "
        f"git -C {memory} update-ref refs/heads/main HEAD~0; "
        f"git -C {memory} branch evil; echo x > {git_dir}/refs/heads/main; "
        f"rm -rf {git_dir}/objects; mv {git_dir} {memory}/moved; "
        f"ln {host.config} hard-link; ln -s {host.config} soft-link; "
        "echo end"
    )
    assert out.rstrip().endswith("end")
    assert "Read-only file system" in out
    assert not host_tmp.exists()
    assert host.refs() == refs
    assert changed(before, host.outside_the_workspace()) == []


@needs_bubblewrap
def test_bash_cannot_signal_the_daemon_or_the_test(host: Host) -> None:
    host.bash(
        f"kill -9 {os.getpid()} {host.daemon_stand_in.pid} {os.getppid()} $PPID; "
        "kill -9 -1; kill -9 1; echo end"
    )
    assert host.daemon_stand_in.poll() is None


@needs_bubblewrap
def test_bash_reaches_no_network_unless_the_host_allows_it(host: Host) -> None:
    call_home = f"timeout 5 bash -c 'echo hi > /dev/tcp/127.0.0.1/{host.listener.port}' && echo IN"
    assert "IN" not in host.bash(call_home)
    assert host.listener.connections() == 0
    allowed = replace(host.ctx, bash_network=True)  # AGENTD_TOOL_NETWORK=1: the control
    assert host.bash(call_home, allowed).rstrip().endswith("IN")
    assert host.listener.connections() == 1


@needs_bubblewrap
def test_bash_writes_its_workspace_and_memory_but_not_the_memory_git(host: Host) -> None:
    out = host.bash(
        'echo w > "$WORKSPACE/w.txt" && echo workspace-ok; echo m > "$MEMORY_DIR/m.md" && '
        'echo memory-ok; touch "$MEMORY_DIR/.git/x" || echo git-refused'
    )
    assert out.splitlines()[:2] == ["workspace-ok", "memory-ok"]
    assert "git-refused" in out
    assert (host.memory / "m.md").read_text() == "m\n"
    (host.memory / "m.md").unlink()


def test_the_file_tools_read_nothing_outside_the_workspace_and_memory(host: Host) -> None:
    """Directly, through a symlink (as bash made above) and through a hard link (as bash
    could make on a host where it runs bare)."""
    soft, hard = host.workspace / "soft", host.workspace / "hard"
    soft.symlink_to(host.config)
    os.link(host.config, hard)
    try:
        refusals = [
            _refusal(ReadFile(), host.ctx, path)
            for path in (
                "/etc/shadow",
                str(host.config),
                str(host.home / "agents/a2/conversations/c1/messages.jsonl"),
                "soft",
                "hard",
                "../../../agentd.toml",
            )
        ]
    finally:
        soft.unlink()
        hard.unlink()
    assert all(refusal is not None for refusal in refusals), refusals
    assert not any(CANARY_KEY in str(refusal) for refusal in refusals)


def _refusal(tool: Tool, ctx: ToolContext, path: str) -> ToolError | None:
    try:
        asyncio.run(tool.run({"path": path}, ctx))
    except ToolError as refused:
        return refused
    return None


@needs_bubblewrap
def test_the_daemons_turn_runs_bash_sandboxed_and_still_commits_memory(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    (agentd_home / "agentd.toml").write_text(f'api_key = "{CANARY_KEY}"\n')
    command = (
        "tr '\\0' '\\n' < /proc/$PPID/environ; cat /proc/*/environ; "
        f"cat {agentd_home}/agentd.toml; touch {agentd_home}/planted; "
        'echo "- from bash" > "$MEMORY_DIR/bash-note.md"; echo end'
    )
    model = ScriptedProvider(
        [tool_reply(("bash", json.dumps({"command": command}))), text_reply("done")]
    )
    daemon.start(model)
    daemon.result("chat", {"text": "go"})
    result = model.requests[1].messages[-1].content
    assert result.rstrip().endswith("end")
    assert CANARY_KEY not in result
    assert not (agentd_home / "planted").exists()
    assert "bash: tr" in daemon.result("memory.log")["commits"][0]["subject"]


def test_without_bubblewrap_the_daemon_offers_no_bash_and_says_so(
    daemon: DaemonRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_no_bubblewrap(monkeypatch)
    model = ScriptedProvider([text_reply("ok")])
    with structlog.testing.capture_logs() as logs:
        daemon.start(model)
    daemon.result("chat", {"text": "hi"})
    assert "bash" not in [tool.name for tool in model.requests[0].tools]
    assert any(log["event"] == "agent_bash_not_offered" for log in logs)
    finding = check_agent_bash(Settings())
    assert not finding.ok
    assert finding.line().startswith("✗ agent bash: bash not offered to the model: sandbox off")


def test_without_bubblewrap_an_opted_in_daemon_runs_bash_bare_but_keyless_and_says_so(
    daemon: DaemonRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_no_bubblewrap(monkeypatch)
    model = ScriptedProvider(
        [tool_reply(("bash", json.dumps({"command": "env; echo end"}))), text_reply("ok")]
    )
    with structlog.testing.capture_logs() as logs:
        daemon.start(model, unsandboxed_bash=True)
    daemon.result("chat", {"text": "hi"})
    assert "bash" in [tool.name for tool in model.requests[0].tools]
    result = model.requests[1].messages[-1].content
    assert result.rstrip().endswith("end") and CANARY_KEY not in result
    assert any(log["event"] == "agent_bash_unsandboxed" for log in logs)
    finding = check_agent_bash(Settings(unsandboxed_bash=True))
    assert not finding.ok and "UNSANDBOXED" in finding.line()


@pytest.mark.slow
def test_a_running_agentd_serve_holds_no_key_in_its_environment(agentd_home: Path) -> None:
    """What ``tr '\\0' '\\n' < /proc/$PPID/environ`` showed an unsandboxed bash."""
    daemon = AgentdProcess(OPENAI_API_KEY=CANARY_KEY, AGENTD_API_KEY=CANARY_KEY).start()
    try:
        assert daemon.proc is not None
        environ = Path(f"/proc/{daemon.proc.pid}/environ").read_bytes()
    finally:
        daemon.stop()
    assert b"sk-canary" not in environ
    assert b"AGENTD_HOME=" in environ
