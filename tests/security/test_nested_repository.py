"""A model makes a git repository inside memory whose config runs a command: it never runs.

The attack of issue 21: in its memory, the model creates ``notes/sub/.git`` with a commit,
a ``.gitattributes`` naming filter ``x`` for every path, and, in the nested repository's
own config, ``filter.x.clean = sh .f.sh``, a script that copies ``agentd.toml`` (and its
key) to a canary on the host, then changes a file without changing its size (so git must
filter it to know). Git in the parent descends into a tracked nested repository
(``status``, ``add``) and runs that filter there, outside every sandbox, as the daemon's
user. Two routes: the main agent's own ``bash`` (the mock model, told to run the attack,
calls it and says what the call returned; the real daemon, here in the test's process,
driven by the real ``agentctl``, real bubblewrap, real git), and the reflection sub-agent
in its clone (the real pipeline and sandbox). Each ends with no canary on the host, the
typed error where the model or the user sees it, and no nested repository in memory's
history. A 20 MB file made by the same ``bash`` is not committed either.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import sandbox
from shared.memory import git
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection.backoff import load_backoff
from tests.reflector.conftest import READ, World, watermark
from tests.reflector.conftest import world as world  # the fixture
from tests.security.walls import CANARY_KEY
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)


def nested_repository_attack(host_home: Path, canary: Path) -> str:
    """Make ``notes/sub`` a repository whose config runs a script on the host for any git
    that looks inside; ``$MEMORY_DIR`` is where the model's shell sees memory."""
    script = f"cat {shlex.quote(str(host_home / 'agentd.toml'))} > {shlex.quote(str(canary))}; cat"
    return (
        'cd "$MEMORY_DIR" && mkdir -p notes/sub notes/sub2 && cd notes/sub && git init -q && '
        "echo a > a.md && git add a.md && git -c user.name=m -c user.email=m@m commit -qm a && "
        "printf '* filter=x diff=x\\n' > .gitattributes && "
        f"printf '%s\\n' {shlex.quote(script)} > .f.sh && "
        "git config filter.x.clean 'sh .f.sh' && git config filter.x.smudge 'sh .f.sh' && "
        "git config diff.x.textconv 'sh .f.sh' && "
        'printf "gitdir: %s\\n" "$PWD/.git" > ../sub2/.git && '
        "echo b > a.md && echo planted"
    )


def history_of(memory: Path) -> list[str]:
    """Every entry of every commit's tree: mode and path."""
    shas = git.run(memory, "rev-list", "--all").stdout.split()
    entries = set()
    for sha in shas:
        for line in git.run(memory, "ls-tree", "-r", sha).stdout.splitlines():
            info, path = line.split("\t", 1)
            entries.add(f"{info.split()[0]} {path}")
    return sorted(entries)


def no_nested_repository_in(entries: list[str]) -> bool:
    return not any(
        entry.startswith("160000 ") or ".git" in entry.split(" ", 1)[1].split("/")
        for entry in entries
    )


@pytest.fixture
def home_outside_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The daemon's home, short enough for its socket."""
    home = Path(tempfile.mkdtemp(prefix="agentd-nr-", dir="/tmp"))
    monkeypatch.setenv("AGENTD_HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def bash_turn(command: str) -> subprocess.CompletedProcess[str]:
    """A turn in which the mock model runs ``command`` and says what the call returned."""
    return run_agentctl("chat", "-p", f"run `{command}`")


def what_the_model_read(turn: subprocess.CompletedProcess[str]) -> str:
    """The call's result as the mock model read it (its answer, the last line)."""
    return turn.stdout.splitlines()[-1]


@pytest.mark.slow
def test_the_agents_bash_leaves_no_nested_repository_and_nothing_runs_on_the_host(
    home_outside_tmp: Path,
) -> None:
    home = home_outside_tmp
    canary = home / "CANARY"
    (home / "agentd.toml").write_text(f'api_key = "{CANARY_KEY}"\n')
    daemon = DaemonRunner(home)
    daemon.start()
    try:
        first = bash_turn(nested_repository_attack(home, canary))
        status = run_agentctl("status")
        second = bash_turn(
            'echo "- more" > "$MEMORY_DIR/notes/more.md" && '
            'head -c 20000000 /dev/zero > "$MEMORY_DIR/notes/huge.md" && echo written',
        )
        third = run_agentctl("chat", "-p", "anything else?")
        committed = run_agentctl("memory", "commit")
        again = run_agentctl("status")
        (memory,) = home.glob("agents/*/memory")
        uncommitted = git.run(memory, "status", "--porcelain").stdout
    finally:
        daemon.stop()

    assert not canary.exists(), canary.read_text()
    for result in (first, status, second, third, committed, again):
        assert result.returncode == 0, result.stderr
    planted = what_the_model_read(first)
    assert planted.startswith("The command printed: planted"), planted
    assert "[nested_repository: notes/sub/.git is a git repository inside memory" in planted
    assert "also refused: notes/sub2/.git" in planted
    huge = what_the_model_read(second)
    assert huge.startswith("The command printed: written"), huge
    assert "[memory_too_large: notes/huge.md is 20,000,000 bytes, over the 1,048,576-byte" in huge
    entries = history_of(memory)
    assert no_nested_repository_in(entries), entries
    assert "100644 notes/more.md" in entries and "100644 notes/sub/a.md" in entries
    assert not any(entry.endswith("notes/huge.md") for entry in entries)
    assert not (memory / "notes/sub/.git").exists() and not (memory / "notes/huge.md").exists()
    assert uncommitted == ""


def test_a_reflection_that_leaves_a_nested_repository_fails_and_nothing_runs(
    world: World,
) -> None:
    canary = world.home / "CANARY"
    (world.home / "agentd.toml").write_text(f'api_key = "{CANARY_KEY}"\n')
    head = world.git("rev-parse", "HEAD")
    attack = nested_repository_attack(world.home, canary) + (
        ' && cd "$MEMORY_DIR" && echo "- likes tabs" >> system/human.md && git add -A && '
        'git commit -qm "feat(reflection): tabs" && echo committed'
    )
    reflector = ScriptedProvider(
        [
            tool_reply(("bash", READ)),
            tool_reply(("bash", json.dumps({"command": attack}))),
            text_reply("Noted that the user prefers tabs."),
        ]
    )

    outcome = world.reflect(reflector)

    assert "committed" in reflector.requests[2].messages[-1].content
    assert not canary.exists(), canary.read_text()
    assert (outcome.status, outcome.reason) == ("failed", "nested_repository")
    assert "notes/sub/.git is a git repository inside memory" in outcome.message
    assert world.git("rev-parse", "HEAD") == head
    assert "likes tabs" not in world.human()
    assert watermark(world) is None
    assert no_nested_repository_in(history_of(world.memory))
    assert world.git("branch", "--list", "reflection/*") == ""
    assert not any(world.reflections.glob("worktrees/*"))
    # the same transcript may talk it into the same again: the next automatic run waits
    assert load_backoff(world.reflections).retry_at is not None
