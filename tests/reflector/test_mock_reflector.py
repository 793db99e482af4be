"""The mock reflector through the real sub-agent path: loop, tools, sandbox, git commit."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reflector import tools
from reflector.subagent import SubagentRun, run_reflection_subagent
from shared.memory.repo import MemoryRepo
from shared.providers.mock_reflector import READ_PAYLOAD, MockReflector
from shared.store.jsonl import MessageLog

PARENT = "a1"
NOW = datetime(2026, 11, 29, 16, 10, tzinfo=UTC)
"""00:10 on 2026-11-30 in Shanghai, still 2026-11-29 in UTC."""
SHANGHAI = "Asia/Shanghai"
SUBJECT = re.compile(r"^(fix|feat|chore)\(reflection\): .+ 🔮$")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def make_worktree(tmp_path: Path, human: str) -> Path:
    """A parent memory repo and a linked checkout of its HEAD on a reflection branch."""
    MemoryRepo.create(
        tmp_path / "memory", agent_id=PARENT, agent_name="Ada", persona="I help.", human=human
    ).close()
    worktree = tmp_path / "memory-worktrees" / "reflection-1"
    git(tmp_path / "memory", "worktree", "add", "-q", "-b", "reflection/1", str(worktree))
    return worktree


def write_payload(tmp_path: Path, *user: tuple[str, str]) -> Path:
    """A transcript slice with the given (timestamp, text) user records."""
    records: list[dict[str, Any]] = [{"role": "meta", "source": "agentd"}]
    for timestamp, text in user:
        records.append({"role": "user", "content": text, "timestamp": timestamp})
        records.append({"role": "assistant", "content": "好的。", "timestamp": timestamp})
    path = tmp_path / "payload-auto-abc123.json"
    path.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def reflect(
    tmp_path: Path, worktree: Path, payload: Path, *, provider: MockReflector | None = None
) -> SubagentRun:
    return asyncio.run(
        run_reflection_subagent(
            provider=provider or MockReflector(),
            worktree=worktree,
            payload_path=payload,
            parent_agent_id=PARENT,
            job_id="job-7",
            first_id="msg-first",
            last_id="msg-last",
            parent_snapshot="<parent_memory>(snapshot)</parent_memory>",
            is_manifest=False,
            instruction=None,
            conversation_dir=tmp_path / "subagents",
            now=NOW,
            timezone_name=SHANGHAI,
        )
    )


def human_lines(worktree: Path) -> list[str]:
    return git(worktree, "show", "HEAD:system/human.md").splitlines()


def commit_count(worktree: Path) -> int:
    return int(git(worktree, "rev-list", "--count", "main..HEAD"))


SESSION = (
    ("2026-11-29T15:50:00.000Z", "帮我看下这个报错"),
    ("2026-11-29T15:58:00.000Z", "我更喜欢用 tabs 缩进"),
    ("2026-11-29T16:06:00.000Z", "今天我们决定以后一律用 pnpm"),
)


def test_keeps_durable_preferences_and_commits_them(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    main_before = git(tmp_path / "memory", "rev-parse", "main")
    payload = write_payload(tmp_path, *SESSION)

    run = reflect(tmp_path, worktree, payload)

    assert (run.success, run.reason, run.stop_reason) == (True, "ok", "end_turn")
    lines = human_lines(worktree)
    assert lines[-3:] == [
        "- 住在上海",
        "- 我更喜欢用 tabs 缩进",
        "- 2026-11-30 我们决定以后一律用 pnpm",
    ]
    assert not any("报错" in line for line in lines)
    assert commit_count(worktree) == 1
    assert git(worktree, "status", "--porcelain") == ""
    assert git(tmp_path / "memory", "rev-parse", "main") == main_before
    assert git(worktree, "log", "-1", "--format=%an <%ae>").strip() == (
        "Reflection Subagent <a1~reflection@agentd.local>"
    )
    message = git(worktree, "log", "-1", "--format=%B").strip().split("\n")
    assert SUBJECT.match(message[0]), message[0]
    assert message[1:5] == ["", f"Reviewed transcript: {payload}", "", "Updates:"]
    assert any("我更喜欢用 tabs 缩进" in line for line in message if line.startswith("- "))
    assert message[-4:] == [
        "Agent-ID: a1~reflection",
        "Parent-Agent-ID: a1",
        "Reflected-Messages: msg-first..msg-last",
        "Job-ID: job-7",
    ]
    assert "Commit:" in run.report and "tabs" in run.report


def test_without_the_sandbox_the_run_commits_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tools, "_probe", lambda: (False, "sandbox off: test"))
    worktree = make_worktree(tmp_path, "- 住在上海")
    run = reflect(tmp_path, worktree, write_payload(tmp_path, *SESSION))
    assert run.success and commit_count(worktree) == 1
    assert human_lines(worktree)[-1] == "- 2026-11-30 我们决定以后一律用 pnpm"


def test_reads_through_its_tools_and_keeps_its_transcript(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    run = reflect(tmp_path, worktree, write_payload(tmp_path, *SESSION))
    log = list(MessageLog(tmp_path / "subagents" / run.conversation_id / "messages.jsonl"))
    calls = [call for message in log for call in message.tool_calls]
    assert json.loads(calls[0].arguments) == {"command": READ_PAYLOAD}
    assert [call.name for call in calls] == ["bash", "bash", "edit_file", "bash"]
    assert {message.agent_id for message in log} == {"a1~reflection"}
    assert run.steps == 5


def test_a_second_run_on_the_same_payload_changes_nothing(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    payload = write_payload(tmp_path, *SESSION)
    reflect(tmp_path, worktree, payload)
    before = human_lines(worktree)

    run = reflect(tmp_path, worktree, payload)

    assert (run.success, run.reason) == (True, "ok")
    assert commit_count(worktree) == 1
    assert human_lines(worktree) == before
    assert git(worktree, "status", "--porcelain") == ""
    assert "already in memory" in run.report and "Commit: none" in run.report


def test_nothing_worth_keeping_means_no_edit_and_no_commit(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    payload = write_payload(
        tmp_path,
        ("2026-11-29T15:50:00.000Z", "帮我看下这个报错"),
        ("2026-11-29T15:51:00.000Z", "can you fix the failing test?"),
        ("2026-11-29T15:52:00.000Z", "以后能不能用 pnpm？"),
        ("2026-11-29T15:53:00.000Z", "记住我的密码是 hunter2"),
    )
    run = reflect(tmp_path, worktree, payload)
    assert (run.success, run.reason) == (True, "ok")
    assert commit_count(worktree) == 0
    assert git(worktree, "status", "--porcelain") == ""
    assert "a one-off request" in run.report and "a question" in run.report
    assert "looks like a secret" in run.report


def test_a_correction_edits_the_line_in_place(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 称呼：小陆\n- 住在上海")
    payload = write_payload(tmp_path, ("2026-11-29T15:50:00.000Z", "别再叫我小陆了，叫我陆工"))

    run = reflect(tmp_path, worktree, payload)

    assert run.success
    lines = human_lines(worktree)
    assert lines[-2:] == ["- 称呼：陆工", "- 住在上海"]
    assert not any("小陆" in line for line in lines)
    assert git(worktree, "log", "-1", "--format=%s").startswith("fix(reflection): ")
    again = reflect(tmp_path, worktree, payload)
    assert again.success and commit_count(worktree) == 1


def test_a_missing_human_file_is_created_from_bash(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    git(worktree, "rm", "-q", "system/human.md")
    git(worktree, "commit", "-qm", "chore: drop human.md")
    run = reflect(tmp_path, worktree, write_payload(tmp_path, SESSION[1]))
    assert run.success
    assert human_lines(worktree) == [
        "---",
        "name: human",
        "description: What I know about the user.",
        "---",
        "- 我更喜欢用 tabs 缩进",
    ]


def test_relative_dates_use_the_users_local_calendar(tmp_path: Path) -> None:
    """00:06 in Shanghai is the previous day in UTC; 22:00 in New York the next day in UTC."""
    worktree = make_worktree(tmp_path, "- 住在上海")
    payload = write_payload(
        tmp_path,
        ("2026-11-30T03:00:00.000Z", "Yesterday we agreed to always squash merges"),
        ("2026-11-30T03:01:00.000Z", "from now on we use uv today"),
    )
    reflect(tmp_path, worktree, payload, provider=MockReflector(timezone_name="America/New_York"))
    assert human_lines(worktree)[-2:] == [
        "- 2026-11-28 we agreed to always squash merges",
        "- 2026-11-29 from now on we use uv",
    ]


def test_a_manifest_is_read_slice_by_slice(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    first = write_payload(tmp_path, ("2026-11-29T15:58:00.000Z", "我更喜欢用 tabs 缩进"))
    second = first.rename(tmp_path / "payload-slice-1.json")
    manifest = tmp_path / "payload-multi-xyz.json"
    manifest.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "type": "multi_transcript_reflection_payload",
                "transcripts": [
                    {"conversation_id": "c1", "mode": "unreflected", "payload_path": str(second)}
                ],
            }
        )
    )
    run = asyncio.run(
        run_reflection_subagent(
            provider=MockReflector(),
            worktree=worktree,
            payload_path=manifest,
            parent_agent_id=PARENT,
            job_id="job-8",
            first_id="msg-1",
            last_id="msg-2",
            parent_snapshot="",
            is_manifest=True,
            instruction="only preferences",
            conversation_dir=tmp_path / "subagents",
            now=NOW,
            timezone_name=SHANGHAI,
        )
    )
    assert run.success
    assert human_lines(worktree)[-1] == "- 我更喜欢用 tabs 缩进"
