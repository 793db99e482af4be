"""Memory holds plain files within its size limits, whoever writes, and doctor tells the truth.

The agent's file tools refuse, before writing, a file past the per-file limit, a write
that takes memory past its whole limit, and any path inside a nested ``.git`` (scripted
model, real daemon, real git). A user's hand edits over a limit are committed and
reported by ``agentctl status`` and ``agentd doctor``; a nested repository is refused
whoever made it, and named with what to do. ``agentd doctor`` reports each memory repo's
git walls as they are (a planted driver, the attributes gone, a nested repository) without
writing, and ``--fix`` puts them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.stack.doctor import run_doctor
from agentd.stack.doctor_memory import check_memory_sizes, check_memory_walls
from shared.errors import ClientError
from shared.memory import git
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.support.names import model_path

FILE_LIMIT, MEMORY_LIMIT = 1_000, 6_000
NAMES = "abcdefg"
"""Seven files of 950 bytes: more than memory's whole limit holds."""


@pytest.fixture
def model() -> ScriptedProvider:
    return ScriptedProvider([text_reply("hello")])


@pytest.fixture
def memory(daemon: DaemonRunner, model: ScriptedProvider) -> Iterator[Path]:
    daemon.start(model, memory_file_max_bytes=FILE_LIMIT, memory_max_bytes=MEMORY_LIMIT)
    daemon.result("chat", {"text": "hi"})
    yield Path(daemon.result("memory.path", {})["path"])


def tool_results(
    daemon: DaemonRunner, model: ScriptedProvider, *calls: tuple[str, Any]
) -> list[str]:
    """Run one turn calling each tool in turn; what each returned to the model."""
    for name, args in calls:
        model.enqueue(tool_reply((name, json.dumps(args))))
    model.enqueue(text_reply("done"))
    start = len(model.requests)
    daemon.result("chat", {"text": "write these"})
    return [request.messages[-1].content for request in model.requests[start + 1 :]]


def test_the_agents_file_tools_refuse_what_memory_may_not_hold_before_writing(
    daemon: DaemonRunner, model: ScriptedProvider, memory: Path
) -> None:
    head = git.run(memory, "rev-parse", "HEAD").stdout
    big = memory / "notes/big.md"
    fill = [
        ("write_file", {"path": model_path(memory, f"notes/{n}.md"), "content": "f" * 950})
        for n in NAMES
    ]
    results = tool_results(
        daemon,
        model,
        ("write_file", {"path": model_path(memory, "notes/big.md"), "content": "x" * 1_500}),
        (
            "write_file",
            {
                "path": model_path(memory, "notes/sub/.git/config"),
                "content": '[filter "x"]\n\tclean = sh x\n',
            },
        ),
        (
            "edit_file",
            {
                "path": model_path(memory, "system/human.md"),
                "old_string": "name: human",
                "new_string": "name: human" + "y" * 990,
            },
        ),
        *fill,
    )

    assert results[0].startswith(
        "memory_too_large: notes/big.md is 1,500 bytes, over the 1,000-byte limit for one "
        "memory file (AGENTD_MEMORY_FILE_MAX_BYTES). Nothing was written"
    )
    assert results[1].startswith("nested_repository: notes/sub/.git is a git repository")
    assert results[2].startswith("memory_too_large: system/human.md is ")
    fills = results[3:]
    written = [result.startswith("wrote 950 chars") for result in fills]
    first_refused = written.index(False)
    assert first_refused > 0 and not any(written[first_refused:])
    assert fills[first_refused].startswith("memory_too_large: memory would hold ")
    assert (
        "over its 6,000-byte limit (AGENTD_MEMORY_MAX_BYTES). Nothing was written"
        in (fills[first_refused])
    )
    assert not (memory / f"notes/{NAMES[first_refused]}.md").exists()
    assert sum(f.stat().st_size for f in memory.rglob("*.md")) <= MEMORY_LIMIT
    assert not big.exists() and not (memory / "notes/sub").exists()
    assert git.run(memory, "diff", "--quiet", head.strip(), "HEAD", "--", "system").returncode == 0
    assert git.run(memory, "status", "--porcelain").stdout == ""


def test_a_users_oversized_edit_is_committed_and_reported_where_the_user_looks(
    daemon: DaemonRunner, model: ScriptedProvider, memory: Path, agentd_home: Path
) -> None:
    written = daemon.result("memory.write", {"path": "notes/long.md", "text": "w" * 2_000})

    assert written["commit"] is not None
    size = (memory / "notes/long.md").stat().st_size  # with the frontmatter it was given
    [agent] = daemon.result("status", {})["agents"]
    assert agent["memory_content"] == [
        {"rule": "file_too_large", "path": "notes/long.md", "size": size, "limit": FILE_LIMIT}
    ]
    over = f"notes/long.md is {size:,} bytes, over the 1,000-byte limit"
    assert over in agent["memory_content_notice"]
    finding = check_memory_sizes(Settings(home=agentd_home, memory_file_max_bytes=FILE_LIMIT))
    assert not finding.ok and over in finding.detail
    assert check_memory_sizes(Settings(home=agentd_home)).ok  # within the default limits
    long = model_path(memory, "notes/long.md")
    shrink = {"path": long, "old_string": "---\n" + "w" * 100, "new_string": "---\n"}
    grow = {"path": long, "old_string": "---\nw", "new_string": "---\nww"}
    results = tool_results(daemon, model, ("edit_file", shrink), ("edit_file", grow))
    assert results[0] == f"edited {long}: 1 replacement", "the agent may make it smaller"
    assert results[1].startswith("memory_too_large: notes/long.md is "), "but not larger"
    assert (memory / "notes/long.md").stat().st_size == size - 100


def test_a_nested_repository_is_refused_to_the_user_and_named_with_its_fix(
    daemon: DaemonRunner, memory: Path, agentd_home: Path
) -> None:
    head = git.run(memory, "rev-parse", "HEAD").stdout
    git.run(memory, "init", "-q", "notes/cloned")
    (memory / "notes/edited.md").write_text("by hand\n")

    with pytest.raises(ClientError) as refused:
        daemon.result("memory.commit", {})

    assert refused.value.code == "nested_repository"
    assert (
        "notes/cloned/.git" in refused.value.message
        and "Nothing was committed" in refused.value.message
    )
    with pytest.raises(ClientError) as written:
        daemon.result("memory.write", {"path": "notes/new.md", "text": "hand edit\n"})
    assert written.value.code == "nested_repository"
    assert not (memory / "notes/new.md").exists(), "refused before anything was written"
    assert git.run(memory, "rev-parse", "HEAD").stdout == head
    [agent] = daemon.result("status", {})["agents"]
    assert f"rm -rf {memory / 'notes/cloned/.git'}" in agent["memory_content_notice"]
    finding = check_memory_walls(Settings(home=agentd_home))
    assert not finding.ok and "nested git repository notes/cloned/.git" in finding.detail
    assert f"rm -rf {memory / 'notes/cloned/.git'}" in finding.fix


def test_doctor_reports_a_planted_driver_without_writing_and_fix_restores_it(
    daemon: DaemonRunner, memory: Path, agentd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.stop()
    settings = Settings(home=agentd_home)
    assert check_memory_walls(settings).ok
    config = memory / ".git/config"
    with config.open("a") as planted:
        planted.write('[filter "x"]\n\tclean = sh notes/x.sh\n')
    (memory / ".git/info/attributes").write_text("* filter=x\n")
    before = config.read_bytes()

    finding = check_memory_walls(settings)
    run_doctor(settings)

    assert not finding.ok
    assert ".git/config holds filter.x.clean: agentd did not write it" in finding.detail
    assert ".git/info/attributes does not unset filters and drivers" in finding.detail
    assert "agentd doctor --fix" in finding.fix
    assert config.read_bytes() == before, "doctor without --fix writes nothing"
    assert "✗ git walls: " in capsys.readouterr().out
    run_doctor(settings, fix=True)
    assert "restored " in capsys.readouterr().out
    assert check_memory_walls(settings).ok
    assert "filter" not in config.read_text()
