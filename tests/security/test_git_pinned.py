"""A filter, diff or merge driver planted in a memory repo never runs under the harness's git.

The attacker writes the parent repo's own ``.git/config`` (as an integration agent with a
writable ``.git`` could, or a hand) to define drivers, commits a ``.gitattributes`` that
names them for every path, and overwrites ``.git/info/attributes``; or hides the drivers
behind an ``include`` whose target sits in the checkout, where the model can edit it
later. Then every harness command a daemon and a worker run on memory is tried: none may
run a driver, and the config and attributes are agentd's again before the first one runs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.errors import MemoryRepoError
from shared.memory import git, git_pin
from shared.memory.provenance import blame
from shared.memory.repo import MemoryRepo
from tests.security.walls import tripped, tripwire_script

AUTHOR = {"author_name": "Ada", "author_email": "a1@agentd.local"}
AGENTDS_CONFIG = [
    ("core.repositoryformatversion", "0"),
    ("core.filemode", "true"),
    ("core.bare", "false"),
    ("core.logallrefupdates", "true"),
    ("user.name", "Ada"),
    ("user.email", "a1@agentd.local"),
    ("commit.gpgsign", "false"),
    ("gc.auto", "0"),
]
"""What git reads from the config agentd writes for the repo of :func:`repo`."""


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[MemoryRepo]:
    with MemoryRepo.create(
        tmp_path / "agents/a1/memory", agent_id="a1", agent_name="Ada", persona="p", human="- x"
    ) as created:
        yield created


@pytest.fixture
def wire(tmp_path: Path) -> Path:
    directory = tmp_path / "wire"
    directory.mkdir()
    return directory


def drivers(tripwire: Path) -> str:
    return (
        f'[filter "x"]\n\tclean = {tripwire} clean\n\tsmudge = {tripwire} smudge\n'
        f'\tprocess = {tripwire} process\n[diff "x"]\n\ttextconv = {tripwire} textconv\n'
        f'\tcommand = {tripwire} diff\n[merge "x"]\n\tdriver = {tripwire} merge\n'
        f"[diff]\n\texternal = {tripwire} external\n"
    )


def every_harness_command(repo: MemoryRepo) -> None:
    """What the daemon and a worker run on a memory repo, each once."""
    (repo.path / "notes.md").write_text("an edit after the plant\n")
    repo.uncommitted()
    repo.commit_all("turn edit", **AUTHOR)
    (repo.path / "notes.md").write_text("another\n")
    repo.commit_all("turn edit", **AUTHOR)
    repo.log()
    repo.read_tree()
    repo.show("notes.md")
    repo.changed_files("HEAD~2", "HEAD")
    blame(repo, "notes.md")
    git.run(repo.path, "log", "-p", "-3")
    git.run(repo.path, "diff", "HEAD~1", "HEAD")
    git.run(repo.path, "checkout", "-q", "HEAD~1", "--", "notes.md")
    git.run(repo.path, "checkout", "-q", "HEAD", "--", "notes.md")


def test_drivers_in_the_repos_own_config_and_attributes_never_run(
    repo: MemoryRepo, wire: Path
) -> None:
    (repo.path / ".gitattributes").write_text("* filter=x diff=x merge=x\n")
    repo.commit_all("attributes", **AUTHOR)
    with (repo.path / ".git/config").open("a") as config:
        config.write(drivers(tripwire_script(wire)))
    (repo.path / ".git/info/attributes").write_text("* filter=x diff=x merge=x\n")

    every_harness_command(repo)

    assert not tripped(wire), (wire / "agentd-tripwire").read_text()
    assert git.config_entries(repo.path / ".git/config") == AGENTDS_CONFIG
    assert (repo.path / ".git/info/attributes").read_bytes() == git_pin.ATTRIBUTES


def test_drivers_behind_an_include_the_checkout_holds_never_run(
    repo: MemoryRepo, wire: Path
) -> None:
    """``include.path`` and ``includeIf`` name a file git reads at every command: one in
    the checkout is the model's to rewrite whenever it likes."""
    (repo.path / ".gitattributes").write_text("* filter=x diff=x\n")
    (repo.path / "inc.cfg").write_text(drivers(tripwire_script(wire)))
    repo.commit_all("attributes and an include target", **AUTHOR)
    with (repo.path / ".git/config").open("a") as config:
        config.write(
            f"[include]\n\tpath = {repo.path / 'inc.cfg'}\n"
            f'[includeIf "gitdir:{repo.path}/"]\n\tpath = {repo.path / "inc.cfg"}\n'
        )

    every_harness_command(repo)

    assert not tripped(wire)
    assert "inc.cfg" not in (repo.path / ".git/config").read_text()


def test_a_config_exactly_as_agentd_writes_it_is_pinned_without_git_and_no_other_is(
    repo: MemoryRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new process meets the repo: agentd's own config is recognised byte for byte (no
    git parse); a byte more, a quoted value or another layout is parsed by git as before."""
    config = (repo.path / ".git/config").read_bytes()
    assert git_pin.is_canonical(config)
    parsed: list[Path] = []
    parse = git.config_entries
    monkeypatch.setattr(git, "config_entries", lambda path: parsed.append(path) or parse(path))
    monkeypatch.setattr(git, "_pinned", {})
    assert git.pin(repo.path) == [] and parsed == []

    section = config.index(b"[user]")
    for variant in (
        config + b'[filter "x"]\n\tclean = x\n',
        config + b"[core]\n\tworktree = x\n",
        config[:section] + b"\tworktree = x\n" + config[section:],
        config.replace(b"name = Ada", b'name = "Ada"'),
        config.replace(b"name = Ada", b"name = Ada "),
        config.replace(b"\n", b"\r\n"),
        config.replace(b"[user]", b"[User]"),
        config.replace(b"[gc]", b"[gc]\n[include]"),
        config[:-1],
    ):
        assert not git_pin.is_canonical(variant), variant
        (repo.path / ".git/config").write_bytes(variant)
        git.pin(repo.path)
        assert parsed, variant
        parsed.clear()
    assert git.config_entries(repo.path / ".git/config") == AGENTDS_CONFIG


AS_GIT_INIT_WRITES_IT = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = false\n\tbare = false\n"
    "\tlogallrefupdates = true\n\tignorecase = true\n\tprecomposeunicode = true\n"
)
"""``git init`` on a case-insensitive file system with macOS's Unicode."""
IMPORTED_OF_ANOTHER_LAYOUT = (
    '[core]\n    filemode = false\n\tIgnoreCase = "true"\n\tprecomposeunicode = true\n'
    "\tworktree = /elsewhere\n"
    '[filter "x"]\n\tclean = touch /tmp/agentd-pwned\n[include]\n\tpath = ../inc.cfg\n'
)
"""An imported repository's: laid out otherwise (read by git), with a driver and more."""


@pytest.mark.parametrize(
    "written", [AS_GIT_INIT_WRITES_IT, IMPORTED_OF_ANOTHER_LAYOUT], ids=["git-init", "imported"]
)
def test_writing_the_identity_keeps_the_file_systems_keys_and_nothing_else(
    repo: MemoryRepo, written: str
) -> None:
    """agentd's config keeps what ``git init`` found out about the file system, whether
    it reads that from ``git init``'s plain lines or asks git, drops any driver, include
    or worktree, and is still recognised as agentd's."""
    (repo.path / ".git/config").write_text(written)
    git.write_config(repo.path, "Ada Lovelace", "a1@agentd.local")

    entries = git.config_entries(repo.path / ".git/config") or []
    assert ("core.ignorecase", "true") in entries and ("core.filemode", "false") in entries
    assert ("core.precomposeunicode", "true") in entries
    assert ("user.name", "Ada Lovelace") in entries
    dropped = ("filter.", "include.", "core.worktree")
    assert not [key for key, _ in entries if key.startswith(dropped)]
    assert git_pin.is_canonical((repo.path / ".git/config").read_bytes())


def test_an_identity_with_quotes_and_newlines_survives_a_restore(repo: MemoryRepo) -> None:
    """The restored config keeps the agent's name as git read it, whatever its characters."""
    git.run(repo.path, "config", "user.name", 'Ada "the\\agent"\n; #x')
    with (repo.path / ".git/config").open("a") as config:
        config.write("[core]\n\tworktree = /elsewhere\n")

    assert git.pin(repo.path) == [".git/config (it held core.worktree)"]
    assert ("user.name", 'Ada "the\\agent"\n; #x') in (
        git.config_entries(repo.path / ".git/config") or []
    )
    assert git.pin_problems(repo.path) == []


def test_a_fifo_or_a_link_in_place_of_the_pinned_files_is_replaced_not_used(
    repo: MemoryRepo, tmp_path: Path
) -> None:
    """A FIFO would hang the daemon on open; a link would aim the write elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "attributes").write_text("kept\n")
    info = repo.path / ".git/info"
    (info / "attributes").unlink()
    os.mkfifo(info / "attributes")
    assert git.pin_problems(repo.path) == [
        ".git/info/attributes does not unset filters and drivers"
    ]
    repo.log()
    assert (info / "attributes").read_bytes() == git_pin.ATTRIBUTES

    (info / "attributes").unlink()
    info.rmdir()
    info.symlink_to(elsewhere)
    repo.log()
    assert not info.is_symlink() and (info / "attributes").read_bytes() == git_pin.ATTRIBUTES
    assert (elsewhere / "attributes").read_text() == "kept\n"


def test_git_does_not_run_where_git_would_follow_a_link_or_a_gitdir_file(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other"
    git.run(tmp_path, "init", "-q", str(other))
    linked, pointing = tmp_path / "linked", tmp_path / "pointing"
    linked.mkdir()
    (linked / ".git").symlink_to(other / ".git")
    pointing.mkdir()
    (pointing / ".git").write_text(f"gitdir: {other / '.git'}\n")

    for checkout in (linked, pointing):
        with pytest.raises(MemoryRepoError, match="not a git directory"):
            git.run(checkout, "status")


def test_doctor_reads_without_writing(repo: MemoryRepo) -> None:
    """``pin_problems`` reports; only ``pin`` puts back."""
    config = repo.path / ".git/config"
    with config.open("a") as appended:
        appended.write('[remote "o"]\n\tuploadpack = sh evil.sh\n')
    (repo.path / ".git/info/attributes").unlink()
    before = config.read_bytes()

    assert git.pin_problems(repo.path) == [
        ".git/config holds remote.o.uploadpack: agentd did not write it",
        ".git/info/attributes does not unset filters and drivers",
    ]
    assert config.read_bytes() == before
    assert not (repo.path / ".git/info/attributes").exists()
    assert len(git.pin(repo.path)) == 2
    assert git.pin_problems(repo.path) == []


def test_a_tracked_nested_repository_is_never_entered(repo: MemoryRepo, wire: Path) -> None:
    """A nested repository already in the index (an old commit, a hand, a branch): the
    harness's status, diff, log, blame, checkout, reset, merge, revert and stash never run
    git inside it, so its filter never runs (``git add`` does go in: memory commits take
    nested repositories out first, :mod:`shared.memory.screen`)."""
    tripwire = tripwire_script(wire)
    sub = repo.path / "notes/sub"
    sub.mkdir(parents=True)
    plain = ["git", "-c", "user.name=m", "-c", "user.email=m@m", "-C"]
    subprocess.run([*plain, str(sub), "init", "-q"], check=True)
    (sub / "a.md").write_text("a\n")
    subprocess.run([*plain, str(sub), "add", "a.md"], check=True)
    subprocess.run([*plain, str(sub), "commit", "-qm", "a"], check=True)
    (sub / ".gitattributes").write_text("* filter=x diff=x\n")
    with (sub / ".git/config").open("a") as config:
        config.write(drivers(tripwire))
    subprocess.run([*plain, str(repo.path), "add", "notes/sub"], check=True, capture_output=True)
    subprocess.run([*plain, str(repo.path), "commit", "-qm", "gitlink"], check=True)
    subprocess.run([*plain, str(repo.path), "branch", "other", "HEAD~1"], check=True)
    (sub / "a.md").write_text("b\n")  # the same size: only its filter can tell git it changed
    (repo.path / "system/human.md").write_text("- y\n")

    assert repo.uncommitted() == ["system/human.md"]  # what is inside is not looked at
    for command in (
        ("diff", "HEAD"),
        ("diff", "--cached", "--quiet"),
        ("log", "-p", "-2"),
        ("checkout", "-q", "other"),
        ("checkout", "-q", "main"),
        ("merge", "--no-ff", "--no-edit", "other"),
        ("revert", "--no-commit", "HEAD"),
        ("revert", "--abort"),
        ("stash", "-u"),
        ("stash", "pop"),
        ("reset", "-q", "--hard", "HEAD"),
    ):
        git.run(repo.path, *command, check=False)
    blame(repo, "system/human.md")

    assert not tripped(wire), (wire / "agentd-tripwire").read_text()
