"""Nothing a model reads in its sandbox names a host path, and everything still works.

The agent's bash and the reflection sub-agent's bash run in real bubblewrap on a home
under ``/tmp`` and one outside it (``--tmpfs /tmp`` once hid the first). Each runs what
an attacker looking for the home would: ``/proc/self/mountinfo`` (which names the source
of every bind mount), ``pwd``, the environment, bwrap's own command line and environment
(``/proc/1``), the clone's ``objects/info/alternates`` (which named the parent's object
store by its host path), git's idea of where it is, and an error message. None of it
may name the home, the agent's directory or the worktrees. Then the agent edits memory
through bash and through ``edit_file`` by the names its system prompt gives, a
reflection commits in its clone and is merged, and the daemon's own turn does both.
Where staging the binds is not possible the sandbox still runs, under the same names, and
says that ``mountinfo`` shows host paths; where bash runs bare the names are the host
paths and the tools take them.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from agentd.jobs.checkout import create_worktree
from agentd.jobs.finalize import finalize
from agentd.stack.doctor import check_sandbox
from reflector.tools import ReflectionBash, reflection_context
from shared import sandbox
from shared.agent.tools.base import ToolContext
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile, ReadFile
from shared.agent.tools.view import memory_name
from shared.memory.compile import compile_system_prompt
from shared.memory.repo import MemoryRepo
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.settings import Settings
from tests.agent.tools.conftest import fake_no_bubblewrap
from tests.support.daemon import DaemonRunner
from tests.support.payloads import payload_of

needs_bubblewrap = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)
LOOK_AROUND = (
    "cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo; pwd; env; "
    "tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' '\\n' < /proc/1/environ; "
    'readlink /proc/1/cwd /proc/self/cwd; ls -la / . "$MEMORY_DIR" "$MEMORY_DIR/.git"; '
    'cat "$MEMORY_DIR/.git/objects/info/alternates"; cat "$MEMORY_DIR/.git/config"; '
    'git -C "$MEMORY_DIR" rev-parse --show-toplevel --absolute-git-dir; '
    "cat /no/such/file; echo end"
)
SAID = (("2026-11-29T15:50:00+00:00", "I prefer tabs."),)


class Home:
    """Agent a1 with its workspace and memory, and a reflection job on its memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.agent = path / "agents" / "a1"
        self.workspace = self.agent / "workspace"
        self.workspace.mkdir(parents=True)
        self.memory = self.agent / "memory"
        MemoryRepo.create(self.memory, agent_id="a1", agent_name="Ada", persona="p", human="- x")
        self.worktrees = self.agent / "reflections" / "worktrees"

    def ctx(self) -> ToolContext:
        """The main agent's context as the daemon builds it (the names decided then)."""
        return ToolContext(
            agent_id="a1", workspace=self.workspace, memory_dir=self.memory, bash_timeout_s=20
        )

    def bash(self, command: str, ctx: ToolContext | None = None) -> str:
        return asyncio.run(Bash().run({"command": command}, ctx or self.ctx()))

    def host_paths_in(self, text: str) -> list[str]:
        """The host paths (or telling parts of them) ``text`` names."""
        markers = [self.path.name, str(self.agent), "/agents/", "worktrees", "reflections"]
        return [marker for marker in markers if marker in text]


@pytest.fixture(params=["home-under-tmp", "home-outside-tmp"])
def home(request: pytest.FixtureRequest) -> Iterator[Home]:
    base = "/tmp" if request.param == "home-under-tmp" else "/var/tmp"
    path = Path(tempfile.mkdtemp(prefix="agentd-hostpaths-", dir=base))
    yield Home(path)
    shutil.rmtree(path, ignore_errors=True)


@needs_bubblewrap
def test_the_agents_bash_names_no_host_path(home: Home) -> None:
    out = home.bash(LOOK_AROUND)
    assert out.rstrip().endswith("end")
    assert home.host_paths_in(out) == []
    assert "\n/workspace\n" in out and "MEMORY_DIR=/memory" in out and "HOME=/workspace" in out
    assert " /memory " in out and " /workspace " in out, "mountinfo lists the neutral names"
    assert sorted(p.name for p in home.agent.iterdir()) == ["memory", "workspace"], "no scratch"


@needs_bubblewrap
def test_the_agent_edits_memory_by_the_names_its_prompt_gives(home: Home) -> None:
    prompt = compile_system_prompt("base", {}, memory_name(home.memory))
    named = re.search(r'<memory dir="([^"]+)">', prompt)
    assert named is not None and named[1] == "/memory"
    human = f"{named[1]}/system/human.md"

    out = home.bash(f"echo '- from bash' >> {human} && tail -n 1 {human}")
    edited = asyncio.run(
        EditFile().run({"path": human, "old_string": "- x", "new_string": "- y"}, home.ctx())
    )
    read = asyncio.run(ReadFile().run({"path": human}, home.ctx()))

    assert out == "- from bash"
    assert edited == "edited /memory/system/human.md: 1 replacement"
    assert "- y" in read and "- from bash" in read
    assert (home.memory / "system/human.md").read_text().endswith("- y\n- from bash\n")


@needs_bubblewrap
def test_the_reflection_sub_agent_names_no_host_path_and_its_work_is_merged(home: Home) -> None:
    payload = payload_of(home.agent / "reflections", *SAID)
    clone = create_worktree(home.memory, home.worktrees, "job-1", author_email="a@b")
    ctx = reflection_context(worktree=clone.path, payload_path=payload.path, parent_agent_id="a1")
    bash = ReflectionBash(payload.files)

    def run(command: str) -> str:
        return asyncio.run(bash.run({"command": command, "timeout_s": 20}, ctx))

    out = run(f'{LOOK_AROUND}; cat .git/objects/info/alternates; cat "$TRANSCRIPT_PATH"; pwd')
    assert out.rstrip().endswith("/memory")
    assert home.host_paths_in(out) == []
    assert "I prefer tabs." in out, "the payload is readable"
    assert f"TRANSCRIPT_PATH=/transcript/{payload.path.name}" in out
    assert ".git/objects/info/alternates: No such file or directory" in out

    committed = run(
        "echo '- prefers tabs' >> system/human.md && git add -A && "
        "git commit -qm 'feat(reflection): tabs' && git log --format=%s"
    )
    assert committed.splitlines()[0] == "feat(reflection): tabs"
    assert sorted(p.name for p in home.worktrees.iterdir()) == ["job-1"], "no scratch"

    result = finalize(clone, should_merge=True)
    assert result.status == "merged"
    assert "- prefers tabs" in (home.memory / "system/human.md").read_text()


@needs_bubblewrap
def test_the_daemons_turn_shows_the_names_and_commits_what_bash_and_edit_file_wrote(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    model = ScriptedProvider(
        [
            tool_reply(("bash", json.dumps({"command": LOOK_AROUND}))),
            tool_reply(("bash", json.dumps({"command": "echo '- b' >> /memory/system/human.md"}))),
            tool_reply(
                (
                    "edit_file",
                    json.dumps(
                        {"path": "/memory/system/persona.md", "old_string": "zz", "new_string": "y"}
                    ),
                ),
                ("write_file", json.dumps({"path": "/memory/notes/n.md", "content": "- n\n"})),
            ),
            text_reply("done"),
        ]
    )
    daemon.start(model)
    daemon.result("chat", {"text": "go"})

    assert '<memory dir="/memory">' in model.requests[0].system
    seen = "\n".join(
        str(message.content) for request in model.requests for message in request.messages
    )
    assert agentd_home.name not in seen and "/agents/" not in seen
    assert "old_string not found in /memory/system/persona.md" in seen
    subjects = [c["subject"] for c in daemon.result("memory.log")["commits"]]
    assert "write_file: create notes/n.md" in subjects and any("bash: echo" in s for s in subjects)


@needs_bubblewrap
def test_where_staging_fails_the_sandbox_runs_under_the_same_names_and_says_so(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_CHECKED", {})
    monkeypatch.setattr(sandbox, "_check", lambda _plan: "overlayfs refused (test)")
    with structlog.testing.capture_logs() as logs:
        first = home.bash(LOOK_AROUND)
        home.bash("echo '- bare binds' >> /memory/system/human.md")
    assert first.rstrip().endswith("end")
    assert "\n/workspace\n" in first and "MEMORY_DIR=/memory" in first
    assert str(home.memory) in first, "mountinfo names the bind's source: the documented cost"
    assert (home.memory / "system/human.md").read_text().endswith("- bare binds\n")
    warnings = [log for log in logs if log["event"] == "sandbox_paths_visible"]
    assert [w["reason"] for w in warnings] == ["overlayfs refused (test)"], "said once"
    hidden, why = sandbox.hides_host_paths(home.memory)
    assert not hidden and "overlayfs refused (test)" in why
    doctor = check_sandbox(Settings(home=home.path)).line()
    assert (
        doctor.startswith("✓ sandbox: sandbox on")
        and "host paths in /proc/self/mountinfo" in doctor
    )


@needs_bubblewrap
def test_doctor_says_the_sandbox_names_no_host_path(home: Home) -> None:
    assert (
        check_sandbox(Settings(home=home.path))
        .line()
        .endswith("; the sandbox shows its directories under neutral names only")
    )
    assert sorted(p.name for p in home.path.iterdir()) == ["agents"], "the check left nothing"


def test_where_bash_runs_bare_the_names_are_the_host_paths_and_still_work(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_no_bubblewrap(monkeypatch)
    ctx = replace(home.ctx(), bash_unsandboxed=True)
    assert memory_name(home.memory) == str(home.memory)
    out = home.bash('echo "$MEMORY_DIR"; pwd; echo "- bare" >> "$MEMORY_DIR/system/human.md"', ctx)
    assert out.splitlines() == [str(home.memory), str(home.workspace)]
    human = str(home.memory / "system/human.md")
    edited = asyncio.run(
        EditFile().run({"path": human, "old_string": "- bare", "new_string": "- B"}, ctx)
    )
    assert edited == f"edited {human}: 1 replacement"
    assert (home.memory / "system/human.md").read_text().endswith("- B\n")
