"""The chaos bench's checks catch what they exist to catch: a fact in memory twice, a user
message lost or logged twice, a torn or garbled log line, reflection debris left behind.

The bench itself (``chaos.py``) is too slow for the suite; these pin that its verdicts
can fail, on a home built by hand with real git.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.memory.repo import MemoryRepo
from shared.models.messages import Message
from tests.faults.checks import Problem, Said, fact_count, leftovers, message_problems
from tests.faults.stack import Home

AGENT = "agent-chaos"
CONVERSATION = "conv-chaos"
FACT = "I always want fact-1-abc123 in replies"


@pytest.fixture
def home(agentd_home: Path) -> Home:
    home = Home(agentd_home, {})
    MemoryRepo.create(
        home.layout.memory_dir(AGENT), agent_id=AGENT, agent_name="chaos", persona="p", human=""
    ).close()
    home.layout.conversation_dir(AGENT, CONVERSATION).mkdir(parents=True)
    return home


def _log(home: Home) -> Path:
    return home.layout.conversation_dir(AGENT, CONVERSATION) / "messages.jsonl"


def _message(text: str, *, role: str = "user", message_id: str | None = None) -> Message:
    return Message.of(
        id=message_id or f"msg-{abs(hash((text, role)))}",
        agent_id=AGENT,
        conversation_id=CONVERSATION,
        role=role,  # type: ignore[arg-type]
        content=text,
    )


def _append(home: Home, *lines: bytes) -> None:
    with open(_log(home), "ab") as log:
        log.write(b"".join(lines))


def _remember(home: Home, path: str, line: str) -> None:
    memory = home.layout.memory_dir(AGENT)
    target = memory / path
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a") as file:
        file.write(f"- {line}\n")
    with MemoryRepo(memory) as repo:
        repo.commit_all("remember", author_name="chaos", author_email="c@agentd.local")


def test_a_fact_is_counted_in_every_committed_file(home: Home) -> None:
    assert fact_count(home, "fact-1-abc123") == 0
    _remember(home, "system/human.md", FACT)
    assert fact_count(home, "fact-1-abc123") == 1

    _remember(home, "notes/prefs.md", FACT)
    assert fact_count(home, "fact-1-abc123") == 2

    (home.layout.memory_dir(AGENT) / "system" / "human.md").write_text(FACT * 3)
    assert fact_count(home, "fact-1-abc123") == 2, "only what is committed at HEAD counts"


def test_kept_messages_must_be_logged_once_and_unkept_ones_at_most_once(home: Home) -> None:
    _append(
        home,
        _message("once").to_line(),
        _message("twice", message_id="msg-a").to_line(),
        _message("twice", message_id="msg-b").to_line(),
        _message("once", role="assistant").to_line(),
    )
    said = [
        Said("once", must_be_kept=True),
        Said("twice", must_be_kept=True),
        Said("never sent", must_be_kept=False),
        Said("acknowledged but missing", must_be_kept=True),
    ]

    assert message_problems(home, said) == [
        Problem("duplicated", "user message 'twice' is logged 2 times"),
        Problem("lost", "user message 'acknowledged but missing' is not in the log"),
    ]


def test_a_message_logged_twice_under_one_id_is_a_duplicate(home: Home) -> None:
    line = _message("hello").to_line()
    _append(home, line, line)

    assert message_problems(home, [Said("hello", must_be_kept=True)]) == [
        Problem("duplicated", f"message {_message('hello').id} is logged 2 times"),
        Problem("duplicated", "user message 'hello' is logged 2 times"),
    ]


def test_a_garbled_line_and_a_torn_tail_are_losses(home: Home) -> None:
    _append(home, _message("kept").to_line(), b'{"id": "msg-x", "role"\n', b'{"id": "msg-y')

    problems = message_problems(home, [Said("kept", must_be_kept=True)])

    assert [p.kind for p in problems] == ["lost", "lost"]
    assert problems[0].detail.endswith('ends in a torn line: {"id": "msg-y')
    assert problems[1].detail.startswith(f"{_log(home)}:2 does not parse")


def test_leftovers_name_every_kind_of_reflection_debris(home: Home) -> None:
    assert leftovers(home) == []
    memory = home.layout.memory_dir(AGENT)
    reflections = home.layout.reflections_dir(AGENT)
    worktree = reflections / "worktrees" / "job-1"
    add = ["worktree", "add", "-q", "-b", "reflection/job-1", str(worktree)]
    subprocess.run(["git", "-C", str(memory), *add], check=True)
    (reflections / "outbox").mkdir()
    (reflections / "outbox" / "rq-1.json").write_text("{}")
    (memory / "stray.md").write_text("uncommitted")
    (memory / ".git" / "MERGE_HEAD").write_text("0" * 40)

    found = leftovers(home)

    assert found == [
        "branches ['reflection/job-1']",
        f"git worktrees ['{worktree}']",
        "reflections/worktrees/ holds ['job-1']",
        "outbox holds ['rq-1.json']",
        "memory checkout dirty: ['?? stray.md']",
        "memory/.git/MERGE_HEAD exists",
    ]
