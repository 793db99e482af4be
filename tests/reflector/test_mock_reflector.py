"""The mock reflector through the real sub-agent path: loop, tools, sandbox, git commit."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentd.jobs.checkout import Worktree, create_worktree
from reflector.subagent import SubagentRun, run_reflection_subagent
from shared import sandbox
from shared.memory.repo import MemoryRepo
from shared.models.messages import AssistantMessage
from shared.providers.mock_reflector import READ_PAYLOAD, MockReflector
from shared.reflection.payload import Limits, PayloadFile, write_payload
from shared.reflection.slices import select_slice
from shared.store.jsonl import MessageLog
from tests.support.payloads import GENEROUS, conversation, payload_of

PARENT = "a1"
NOW = datetime(2026, 11, 29, 16, 10, tzinfo=UTC)
"""00:10 on 2026-11-30 in Shanghai, still 2026-11-29 in UTC."""
SHANGHAI = "Asia/Shanghai"
SUBJECT = re.compile(r"^(fix|feat|chore)\(reflection\): .+ 🔮$")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def make_worktree(tmp_path: Path, human: str) -> Worktree:
    """A parent memory repo and the job's private clone of its HEAD on a reflection branch."""
    MemoryRepo.create(
        tmp_path / "memory", agent_id=PARENT, agent_name="Ada", persona="I help.", human=human
    ).close()
    worktrees = tmp_path / "memory-worktrees"
    return create_worktree(tmp_path / "memory", worktrees, "reflection-1", author_email="a@b")


def reflect(
    tmp_path: Path,
    worktree: Worktree,
    payload: PayloadFile,
    *,
    provider: MockReflector | None = None,
    unsandboxed_bash: bool = False,
) -> SubagentRun:
    return asyncio.run(
        run_reflection_subagent(
            provider=provider or MockReflector(),
            checkout=worktree.path,
            payload=payload,
            parent_agent_id=PARENT,
            job_id="job-7",
            parent_snapshot="<parent_memory>(snapshot)</parent_memory>",
            instruction=None,
            conversation_dir=tmp_path / "subagents",
            now=NOW,
            timezone_name=SHANGHAI,
            unsandboxed_bash=unsandboxed_bash,
        )
    )


def human_lines(worktree: Worktree) -> list[str]:
    return git(worktree.path, "show", "HEAD:system/human.md").splitlines()


def commit_count(worktree: Worktree) -> int:
    return int(git(worktree.path, "rev-list", "--count", f"{worktree.base_head}..HEAD"))


SESSION = (
    ("2026-11-29T15:50:00.000Z", "帮我看下这个报错"),
    ("2026-11-29T15:58:00.000Z", "我更喜欢用 tabs 缩进"),
    ("2026-11-29T16:06:00.000Z", "今天我们决定以后一律用 pnpm"),
)


def test_keeps_durable_preferences_and_commits_them(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    main_before = git(tmp_path / "memory", "rev-parse", "main")
    payload = payload_of(tmp_path, *SESSION)

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
    assert git(worktree.path, "status", "--porcelain") == ""
    assert git(tmp_path / "memory", "rev-parse", "main") == main_before
    assert git(worktree.path, "log", "-1", "--format=%an <%ae>").strip() == (
        "Reflection Subagent <a1~reflection@agentd.local>"
    )
    message = git(worktree.path, "log", "-1", "--format=%B").strip().split("\n")
    assert SUBJECT.match(message[0]), message[0]
    shown = f"/transcript/{payload.path.name}" if sandbox.available() else str(payload.path)
    assert message[1:5] == ["", f"Reviewed transcript: {shown}", "", "Updates:"]
    assert any("我更喜欢用 tabs 缩进" in line for line in message if line.startswith("- "))
    assert message[-4:] == [
        "Agent-ID: a1~reflection",
        "Parent-Agent-ID: a1",
        f"Reflected-Messages: {payload.slices[0].slice.start_id}..{payload.slices[0].slice.end_id}",
        "Job-ID: job-7",
    ]
    assert "Commit:" in run.report and "tabs" in run.report


def test_without_the_sandbox_a_run_the_host_allows_bare_commits_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, "sandbox off: test"))
    worktree = make_worktree(tmp_path, "- 住在上海")
    run = reflect(tmp_path, worktree, payload_of(tmp_path, *SESSION), unsandboxed_bash=True)
    assert run.success and commit_count(worktree) == 1
    assert human_lines(worktree)[-1] == "- 2026-11-30 我们决定以后一律用 pnpm"


def test_reads_through_its_tools_and_keeps_its_transcript(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    run = reflect(tmp_path, worktree, payload_of(tmp_path, *SESSION))
    log = list(MessageLog(tmp_path / "subagents" / run.conversation_id / "messages.jsonl"))
    calls = [c for m in log if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert json.loads(calls[0].arguments) == {"command": READ_PAYLOAD}
    assert [call.name for call in calls] == ["bash", "bash", "edit_file", "bash"]
    assert {message.agent_id for message in log} == {"a1~reflection"}
    assert run.steps == 5


def test_a_second_run_on_the_same_payload_changes_nothing(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    payload = payload_of(tmp_path, *SESSION)
    reflect(tmp_path, worktree, payload)
    before = human_lines(worktree)

    run = reflect(tmp_path, worktree, payload)

    assert (run.success, run.reason) == (True, "ok")
    assert commit_count(worktree) == 1
    assert human_lines(worktree) == before
    assert git(worktree.path, "status", "--porcelain") == ""
    assert "already in memory" in run.report and "Commit: none" in run.report


def test_nothing_worth_keeping_means_no_edit_and_no_commit(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    payload = payload_of(
        tmp_path,
        ("2026-11-29T15:50:00.000Z", "帮我看下这个报错"),
        ("2026-11-29T15:51:00.000Z", "can you fix the failing test?"),
        ("2026-11-29T15:52:00.000Z", "以后能不能用 pnpm？"),
        ("2026-11-29T15:53:00.000Z", "记住我的密码是 hunter2"),
    )
    run = reflect(tmp_path, worktree, payload)
    assert (run.success, run.reason) == (True, "ok")
    assert commit_count(worktree) == 0
    assert git(worktree.path, "status", "--porcelain") == ""
    assert "a one-off request" in run.report and "a question" in run.report
    assert "looks like a secret" in run.report


def test_a_correction_edits_the_line_in_place(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 称呼：小陆\n- 住在上海")
    payload = payload_of(tmp_path, ("2026-11-29T15:50:00.000Z", "别再叫我小陆了，叫我陆工"))

    run = reflect(tmp_path, worktree, payload)

    assert run.success
    lines = human_lines(worktree)
    assert lines[-2:] == ["- 称呼：陆工", "- 住在上海"]
    assert not any("小陆" in line for line in lines)
    assert git(worktree.path, "log", "-1", "--format=%s").startswith("fix(reflection): ")
    again = reflect(tmp_path, worktree, payload)
    assert again.success and commit_count(worktree) == 1


def test_a_missing_human_file_is_created_from_bash(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    git(worktree.path, "rm", "-q", "system/human.md")
    git(worktree.path, "commit", "-qm", "chore: drop human.md")
    run = reflect(tmp_path, worktree, payload_of(tmp_path, SESSION[1]))
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
    payload = payload_of(
        tmp_path,
        ("2026-11-30T03:00:00.000Z", "Yesterday we agreed to always squash merges"),
        ("2026-11-30T03:01:00.000Z", "from now on we use uv today"),
    )
    reflect(tmp_path, worktree, payload, provider=MockReflector(timezone_name="America/New_York"))
    assert human_lines(worktree)[-2:] == [
        "- 2026-11-28 we agreed to always squash merges",
        "- 2026-11-29 from now on we use uv",
    ]


@pytest.mark.slow
def test_a_transcript_in_parts_is_read_part_by_part(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    facts = [f"I always want fact number {n} remembered" for n in range(40)]
    said = tuple((f"2026-11-29T15:{n:02d}:00+00:00", fact) for n, fact in enumerate(facts))
    payload = payload_of(tmp_path, *said, limits=Limits(part_chars=2_000, budget_chars=60_000))
    assert payload.is_manifest and len(payload.slices[0].parts) > 3

    run = reflect(tmp_path, worktree, payload)

    assert run.success and run.unread == []
    assert run.consumed == [payload.slices[0].slice]
    assert human_lines(worktree)[-40:] == [f"- {fact}" for fact in facts]


def test_a_manifest_of_two_conversations_is_read_slice_by_slice(tmp_path: Path) -> None:
    worktree = make_worktree(tmp_path, "- 住在上海")
    first = conversation(
        tmp_path / "home", (("2026-11-29T15:58:00+00:00", "我更喜欢用 tabs 缩进"),)
    )
    second = conversation(tmp_path / "home", (("2026-11-29T16:00:00+00:00", "以后一律用 pnpm"),))
    slices = [(chat.log.path, select_slice(chat.log.path, None)) for chat in (first, second)]
    payload = write_payload(tmp_path / "payloads", PARENT, slices, limits=GENEROUS)  # type: ignore[arg-type]
    assert payload.is_manifest

    run = reflect(tmp_path, worktree, payload)

    assert run.success and [s.conversation_id for s in run.consumed] == [first.id, second.id]
    assert human_lines(worktree)[-2:] == ["- 我更喜欢用 tabs 缩进", "- 以后一律用 pnpm"]
