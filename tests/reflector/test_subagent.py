"""The reflection sub-agent: earned success, weak-model failures, prompts, tools and sandbox."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentd.jobs.checkout import Worktree, create_worktree
from reflector.prompt import system_prompt, task_prompt
from reflector.subagent import SubagentRun, run_reflection_subagent
from reflector.tools import ReflectionBash, ReflectionEditFile, reflection_context
from shared import sandbox
from shared.agent.tools.base import ToolContext
from shared.errors import ProviderHTTPError, ToolError
from shared.memory.repo import MemoryRepo
from shared.providers.base import Provider
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection.payload import Limits, PayloadFile
from shared.store.jsonl import MessageLog
from tests.support.payloads import payload_of
from tests.support.waiting import wait_for

PARENT = "a1"
NOW = datetime(2026, 11, 29, 16, 6, tzinfo=UTC)
READ = json.dumps({"command": 'wc -c "$TRANSCRIPT_PATH" && cat "$TRANSCRIPT_PATH"'})
SAID = (
    ("2026-11-29T15:50:00+00:00", "帮我看下这个报错"),
    ("2026-11-29T15:58:00+00:00", "我更喜欢用 tabs 缩进"),
)
ABSOLUTE_PATH = re.compile(r"(?:^|[\s\"'`(=:])/[A-Za-z0-9._-]")
needs_sandbox = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def job(tmp_path: Path) -> Worktree:
    """A parent memory repo and the job's private clone of it."""
    MemoryRepo.create(
        tmp_path / "memory", agent_id=PARENT, agent_name="Ada", persona="I help.", human="- x"
    ).close()
    worktrees = tmp_path / "memory-worktrees"
    return create_worktree(tmp_path / "memory", worktrees, "reflection-1", author_email="a@b")


@pytest.fixture
def worktree(job: Worktree) -> Path:
    return job.path


@pytest.fixture
def payload(tmp_path: Path) -> PayloadFile:
    return payload_of(tmp_path, *SAID)


@pytest.fixture
def ctx(worktree: Path, payload: PayloadFile) -> ToolContext:
    return reflection_context(worktree=worktree, payload_path=payload.path, parent_agent_id=PARENT)


def reflect(tmp_path: Path, worktree: Path, payload: PayloadFile, provider: Provider, **kw: Any):
    return asyncio.run(
        run_reflection_subagent(
            provider=provider,
            checkout=worktree,
            payload=payload,
            parent_agent_id=PARENT,
            job_id="job-1",
            parent_snapshot="<parent_memory>$MEMORY_DIR/system/human.md</parent_memory>",
            instruction=None,
            conversation_dir=tmp_path / "subagents",
            now=NOW,
            timezone_name="Asia/Shanghai",
            **kw,
        )
    )


@pytest.fixture
def sandboxed(payload: PayloadFile, job: Worktree) -> ReflectionBash:
    """The sub-agent's bash, which may read the payload's files and the parent's objects."""
    return ReflectionBash(payload.files)


def bash(tool: ReflectionBash, ctx: ToolContext, command: str) -> str:
    return asyncio.run(tool.run({"command": command}, ctx))


# --- success must be earned --------------------------------------------------------------


def test_an_empty_report_is_a_failure(tmp_path: Path, worktree: Path, payload: PayloadFile) -> None:
    provider = ScriptedProvider([tool_reply(("bash", READ)), text_reply("  \n")])
    run = reflect(tmp_path, worktree, payload, provider)
    assert (run.success, run.reason, run.stop_reason) == (False, "empty_report", "end_turn")


def test_narrating_without_a_tool_call_has_not_read_the_payload(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    narration = "I will now read the transcript and then update the memory files accordingly."
    run = reflect(tmp_path, worktree, payload, ScriptedProvider([text_reply(narration)]))
    assert (run.success, run.reason, run.report) == (False, "not_read", narration)


def test_running_out_of_steps_is_a_failure(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    provider = ScriptedProvider(
        [tool_reply(("bash", READ), text="Reading."), tool_reply(("bash", '{"command": "ls"}'))]
    )
    run = reflect(tmp_path, worktree, payload, provider, max_steps=2)
    assert (run.success, run.reason, run.stop_reason, run.report) == (
        False,
        "max_steps",
        "max_steps",
        "",
    )


def test_a_provider_error_is_a_failure(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    failure = ProviderHTTPError("boom", status_code=500, model="scripted")
    provider = ScriptedProvider([tool_reply(("bash", READ)), failure])
    run = reflect(tmp_path, worktree, payload, provider)
    assert (run.success, run.reason) == (False, "error")


def test_reading_then_reporting_no_changes_is_earned(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    provider = ScriptedProvider([tool_reply(("bash", READ)), text_reply("Nothing to keep.")])
    run = reflect(tmp_path, worktree, payload, provider)
    assert isinstance(run, SubagentRun)
    assert (run.success, run.reason, run.report, run.steps) == (True, "ok", "Nothing to keep.", 2)
    assert (tmp_path / "subagents" / run.conversation_id / "messages.jsonl").stat().st_size > 0


@pytest.mark.parametrize(
    "command",
    [
        'wc -c "$TRANSCRIPT_PATH"',
        'printf "$TRANSCRIPT_PATH"',
        'ls -l "$(dirname "$TRANSCRIPT_PATH")"',
        'head -c 10 "$TRANSCRIPT_PATH"',
        'grep -o \'"id": "[^"]*"\' "$TRANSCRIPT_PATH"',  # every message id, no text
        'jq ".[0]" "$TRANSCRIPT_PATH"',  # the meta record: the nonce, no message
    ],
)
def test_mentioning_the_payload_is_not_reading_it(
    tmp_path: Path, worktree: Path, payload: PayloadFile, command: str
) -> None:
    provider = ScriptedProvider(
        [tool_reply(("bash", json.dumps({"command": command}))), text_reply("Nothing durable.")]
    )
    run = reflect(tmp_path, worktree, payload, provider)
    assert (run.success, run.reason, run.consumed) == (False, "not_read", [])
    transcript = tmp_path / "subagents" / run.conversation_id / "messages.jsonl"
    (result,) = [m for m in MessageLog(transcript) if m.role == "tool"]
    assert result.content.strip() and "[exit code" not in result.content  # it did run


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_a_reader_that_prints_every_content_with_jq_has_read_it(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    command = json.dumps({"command": "jq '.[].content' \"$TRANSCRIPT_PATH\""})
    provider = ScriptedProvider([tool_reply(("bash", command)), text_reply("Nothing durable.")])
    run = reflect(tmp_path, worktree, payload, provider)
    assert (run.success, run.reason) == (True, "ok")
    assert run.consumed == [payload.slices[0].slice]


def test_reading_only_the_start_consumes_only_what_was_read(tmp_path: Path, worktree: Path) -> None:
    """``head`` shows the first messages: the slice is consumed up to the first user
    message that never came back, and that conversation is left for the next run."""
    said = tuple((f"2026-11-29T15:{n:02d}:00+00:00", f"I always use tool {n}") for n in range(20))
    payload = payload_of(tmp_path, *said)
    command = json.dumps({"command": 'head -n 30 "$TRANSCRIPT_PATH"'})
    provider = ScriptedProvider([tool_reply(("bash", command)), text_reply("Nothing durable.")])

    run = reflect(tmp_path, worktree, payload, provider)

    assert run.success and run.unread == [payload.slices[0].slice.conversation_id]
    (consumed,) = run.consumed
    shown = payload.slices[0]
    assert consumed.end_offset < shown.slice.end_offset
    assert 0 < consumed.messages < shown.slice.messages
    first_unread = next(m for m in shown.shown if m.end_offset > consumed.end_offset)
    assert first_unread.role == "user"


def test_a_whole_read_of_a_file_larger_than_bash_shows_is_not_a_whole_read(
    tmp_path: Path, worktree: Path
) -> None:
    """The old hole: ``cat`` of a 37 KB slice shows its head and tail only. Written as one
    oversized part, the middle never reaches the model and is not consumed."""
    said = tuple(
        (f"2026-11-29T{10 + n // 60:02d}:{n % 60:02d}:00+00:00", f"I always prefer option {n}")
        for n in range(150)
    )
    payload = payload_of(tmp_path, *said, limits=Limits(part_chars=60_000, budget_chars=60_000))
    assert len(payload.slices[0].parts) == 1 and payload.path.stat().st_size > 30_000
    provider = ScriptedProvider([tool_reply(("bash", READ)), text_reply("Nothing durable.")])

    run = reflect(tmp_path, worktree, payload, provider, output_chars=30_000)

    assert run.success and run.unread
    (consumed,) = run.consumed
    assert consumed.end_offset < payload.slices[0].slice.end_offset


# --- what the model is told ---------------------------------------------------------------


def test_the_prompt_states_the_local_date_and_zone() -> None:
    prompt = system_prompt(now=NOW, timezone_name="Asia/Shanghai")
    assert "Today is 2026-11-30 (Asia/Shanghai, UTC+08:00)." in prompt
    west = system_prompt(now=NOW, timezone_name="America/Los_Angeles")
    assert "Today is 2026-11-29 (America/Los_Angeles, UTC-08:00)." in west
    assert all(phase in prompt for phase in ("investigate", "extract", "update", "review"))
    assert "(reflection): <summary> 🔮" in prompt and "15,000 bytes" in prompt


def test_the_task_prompt_has_facts_instruction_and_snapshot_last() -> None:
    snapshot = "<parent_memory>\n<path>$MEMORY_DIR/system/human.md</path>\n</parent_memory>"
    prompt = task_prompt(
        is_manifest=True,
        instruction="focus on tooling </user_instruction> preferences",
        parent_snapshot=snapshot,
        job_id="job-1",
        first_id="msg-a",
        last_id="msg-b",
        child_id="a1~reflection",
        parent_id="a1",
    )
    assert prompt.rstrip().endswith(snapshot)
    assert "$TRANSCRIPT_PATH" in prompt and "$MEMORY_DIR" in prompt and "payload_path" in prompt
    block = prompt.split("<user_instruction>\n")[1].split("\n</user_instruction>")[0]
    assert block == "focus on tooling <\\/user_instruction> preferences"
    for trailer in (
        "Agent-ID: a1~reflection",
        "Parent-Agent-ID: a1",
        "Reflected-Messages: msg-a..msg-b",
        "Job-ID: job-1",
    ):
        assert f"\n{trailer}\n" in prompt
    bare = task_prompt(
        is_manifest=False,
        instruction=None,
        parent_snapshot="",
        job_id="j",
        first_id="a",
        last_id="b",
        child_id="a1~reflection",
        parent_id="a1",
    )
    assert "<user_instruction>" not in bare and "payload_path" not in bare


def test_what_the_model_sees_names_no_absolute_path_and_no_worktree(
    tmp_path: Path, worktree: Path, payload: PayloadFile
) -> None:
    provider = ScriptedProvider([text_reply("done")])
    reflect(tmp_path, worktree, payload, provider)
    request = provider.requests[0]
    seen = [request.system, request.messages[0].content, *(t.description for t in request.tools)]
    for text in seen:
        assert "worktree" not in text.lower()
        assert not ABSOLUTE_PATH.search(text), ABSOLUTE_PATH.search(text)
        assert str(tmp_path) not in text
    assert [tool.name for tool in request.tools] == ["bash", "edit_file"]


# --- tools: environment, path guard, sandbox ---------------------------------------------


def test_bash_env_names_the_payload_and_ids_but_no_keys(
    ctx: ToolContext,
    tmp_path: Path,
    payload: PayloadFile,
    monkeypatch: pytest.MonkeyPatch,
    sandboxed: ReflectionBash,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    lines = bash(sandboxed, ctx, "pwd; env").splitlines()
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert lines[0] == "/memory", "the clone under a neutral name, not its host path"
    assert env["TRANSCRIPT_PATH"] == f"/transcript/{payload.path.name}"
    assert env["MEMORY_DIR"] == "/memory"
    assert str(tmp_path) not in "\n".join(lines)
    assert env["PARENT_AGENT_ID"] == "a1"
    assert env["AGENT_ID"] == "a1~reflection"
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & env.keys()
    assert "sk-" not in "\n".join(lines)


def test_edit_file_writes_only_inside_the_checkout(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "memory" / "system" / "human.md"
    args = {"path": str(outside), "old_string": "- x", "new_string": "- y"}
    with pytest.raises(ToolError, match="write refused"):
        asyncio.run(ReflectionEditFile().run(args, ctx))
    inside = {**args, "path": ctx.names().inside(ctx.workspace / "system" / "human.md")}
    asyncio.run(ReflectionEditFile().run(inside, ctx))
    assert "- y" in (ctx.workspace / "system" / "human.md").read_text()
    assert "- x" in outside.read_text()


@needs_sandbox
def test_sandboxed_bash_writes_only_the_checkout_and_git_dir(
    ctx: ToolContext, worktree: Path, tmp_path: Path, sandboxed: ReflectionBash
) -> None:
    parent_file = tmp_path / "memory" / "system" / "human.md"
    stray = tmp_path / "stray.txt"
    out = bash(
        sandboxed,
        ctx,
        f"cat /proc/1/comm; echo STRAY > {stray}; echo STRAY >> {parent_file}; "
        "touch /usr/agentd-stray; echo '- z' >> system/human.md; "
        "git add -A && git commit -qm 'feat(reflection): z 🔮' && echo committed; "
        'cat "$TRANSCRIPT_PATH" >/dev/null && echo payload-readable',
    )
    assert out.startswith("bwrap\n")
    assert "Read-only file system" in out and "committed" in out and "payload-readable" in out
    assert not stray.exists() and not Path("/usr/agentd-stray").exists()
    assert "STRAY" not in parent_file.read_text()
    assert git(worktree, "log", "-1", "--format=%s") == "feat(reflection): z 🔮\n"


@needs_sandbox
def test_sandboxed_bash_has_no_network_and_a_private_tmp(
    ctx: ToolContext, sandboxed: ReflectionBash
) -> None:
    host_file = Path(tempfile.mkstemp(prefix="agentd-host-", dir="/tmp")[1])
    inner = Path("/tmp") / f"agentd-inner-{uuid.uuid4().hex}"
    try:
        out = bash(
            sandboxed,
            ctx,
            f"echo > /dev/tcp/1.1.1.1/80; test -e {host_file} || echo host-tmp-hidden; "
            f"echo x > {inner} && echo inner-written",
        )
        assert "Network is unreachable" in out
        assert "host-tmp-hidden" in out and "inner-written" in out
        assert not inner.exists()
    finally:
        host_file.unlink()


@needs_sandbox
def test_a_timeout_kills_the_whole_sandbox(
    ctx: ToolContext, worktree: Path, sandboxed: ReflectionBash
) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 3600}.5"  # an hour: only a kill ends it
    command = f"(sleep {marker}; touch late) & sleep 30"
    out = asyncio.run(sandboxed.run({"command": command, "timeout_s": 0.5}, ctx))
    assert "timed out" in out

    def sleeping() -> bool:
        wanted = f"sleep\0{marker}\0".encode()
        for proc in Path("/proc").iterdir():
            try:
                if (proc / "cmdline").read_bytes() == wanted:
                    return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                continue
        return False

    wait_for(lambda: not sleeping(), "the sandbox's background sleep to be killed")
    assert not (worktree / "late").exists()


def test_without_bubblewrap_bash_is_refused_unless_the_host_allows_it_bare(
    ctx: ToolContext,
    worktree: Path,
    payload: PayloadFile,
    monkeypatch: pytest.MonkeyPatch,
    sandboxed: ReflectionBash,
) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, "sandbox off: test"))
    with pytest.raises(ToolError, match="AGENTD_UNSANDBOXED_BASH=1"):
        bash(sandboxed, ctx, "touch ran")
    assert not (worktree / "ran").exists()

    bare = reflection_context(
        worktree=worktree, payload_path=payload.path, parent_agent_id=PARENT, unsandboxed_bash=True
    )
    assert bash(sandboxed, bare, 'test -r "$TRANSCRIPT_PATH" && echo ok') == "ok"


def test_the_probe_explains_a_missing_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda _name: None)
    ok, reason = sandbox._probe.__wrapped__()
    assert not ok and "not on PATH" in reason
