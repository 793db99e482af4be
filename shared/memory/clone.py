"""A private clone of memory at one commit, in which a model may work: how it is made, and
how the harness makes it safe to run git in again before it reads it.

A reflection's sub-agent works in such a clone on a worker (made from the job's bundle,
:mod:`shared.memory.bundles`), and the agent reviewing a proposal in explicit merge mode
works in one on the daemon's host. The clone holds its one base commit itself (shallow:
its ``shallow`` file names it), never a linked worktree or ``clone --shared``: a linked
worktree shares its parent's ``.git`` (hooks, config, refs), so a model able to commit
could plant a hook that runs outside its sandbox or move the parent's ``main``
(``../shared/spec/sandbox.md``); a shared clone's ``objects/info/alternates`` names the
parent's object store by its host path, which the sandbox would have to show.

A model can write anything into the clone's ``.git``, so before any harness git runs in it
again :func:`secure` refuses a ``.git`` replaced by a link or a ``gitdir:`` file and a
nested repository in the checkout, then :func:`restore_metadata` puts its git metadata
back the way the harness made it (config, no hooks, no ``commondir``, no alternates — which
could name another agent's objects — and ``shallow`` naming only the base). Every git
command here runs through :mod:`shared.memory.git`, inert to hooks and config planted in
the clone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from shared.memory import content, git, git_pin
from shared.memory.content import Violation

SUBAGENT_NAME = "Reflection Subagent"
BRANCH_PREFIX = "reflection/"


@dataclass(frozen=True, slots=True)
class Clone:
    """A clone of memory at ``base_head`` on branch ``reflection/<job_id>``."""

    job_id: str
    path: Path
    branch: str
    """``reflection/<job_id>``."""
    base_head: str
    """The memory commit the clone started from: commits after it are the job's work."""
    author_email: str
    """Who its commits say they are from until the harness re-signs them."""


def init_clone(path: Path, base_head: str, author_email: str) -> None:
    """An empty repository at ``path`` whose history stops at ``base_head`` (its
    ``shallow`` file), configured by the harness; the caller fetches ``base_head`` into it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    git.run(path.parent, "init", "--quiet", "--template=", str(path))
    _write_metadata(path / ".git", base_head, author_email)


def secure(clone: Clone) -> str | None:
    """Make the clone's git dir safe for the harness's git, or say why it cannot be: the
    one gate before any harness git runs in the clone or fetches from it.

    A nested repository anywhere in the clone's checkout raises
    :class:`~shared.errors.NestedRepository`: ``git status`` or ``add`` there could descend
    into it and obey its config. Nothing of it is read or removed: the clone is deleted
    with the job."""
    refused = untrusted(clone)
    if refused is None:
        content.refuse(nested_repositories(clone))
        restore_metadata(clone)
    return refused


def nested_repositories(clone: Clone) -> list[Violation]:
    """Every ``.git`` below the clone's root (directory, file or link), read from the file
    system alone."""
    found = content.read_checkout(clone.path).nested
    return [Violation("nested_repository", path) for path in found]


def untrusted(clone: Clone) -> str | None:
    """Why the clone's git dir cannot be read safely, or None. A model may replace
    ``.git`` by a link or a ``gitdir:`` file pointing at another repo (the parent's,
    another agent's): git would follow it out of the clone."""
    git_dir = clone.path / ".git"
    if clone.path.is_symlink() or git_dir.is_symlink() or not git_dir.is_dir():
        return "the reflection replaced its checkout's .git; nothing was taken from it"
    # restore_metadata writes below these: a link here would aim its writes elsewhere.
    for directory in (git_dir / "objects", git_dir / "objects" / "info"):
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            where = directory.relative_to(clone.path)
            return f"the reflection replaced {where} by a link; nothing was taken from it"
    return None


def restore_metadata(clone: Clone) -> None:
    """Put the clone's git dir back as the harness made it, before any harness git runs in
    it or fetches from it: our config, no hooks, no ``commondir``, ``info/`` holding only
    the attributes that unset every filter and driver (:mod:`shared.memory.git_pin`), no
    alternates (another repo's objects), and ``shallow`` naming only the commit it
    started from, whose history it does not hold."""
    git_dir = clone.path / ".git"
    for name in ("hooks", "info", "commondir", "config.worktree", "worktrees", "shallow"):
        purge(git_dir / name)
    (git_dir / "config").unlink(missing_ok=True)
    _write_metadata(git_dir, clone.base_head, clone.author_email)
    for name in ("alternates", "http-alternates"):
        (git_dir / "objects" / "info" / name).unlink(missing_ok=True)


def _write_metadata(git_dir: Path, base_head: str, author_email: str) -> None:
    """The clone's whole config is agentd's (:func:`git_pin.canonical`), written at
    creation and again before the harness reads the clone: whatever a model wrote there (a
    filter driver, an fsmonitor, an include) is gone before any harness git runs in it,
    and the harness's git finds it pinned without a parse."""
    identity = [("user.name", SUBAGENT_NAME), ("user.email", author_email)]
    (git_dir / "config").write_bytes(git_pin.canonical(identity))
    git_pin.write_attributes(git_dir)
    (git_dir / "shallow").write_text(f"{base_head}\n", encoding="utf-8")


def uncommitted(clone: Clone) -> list[str]:
    """The files the clone's checkout changed and did not commit (run :func:`secure` first)."""
    status = git.run(clone.path, "status", "--porcelain").stdout.split("\n")
    return [line[3:] for line in status if len(line) > 3]


def head(clone: Clone) -> str:
    return git.run(clone.path, "rev-parse", "--verify", "HEAD^{commit}").stdout.strip()


def branch_exists(repo_dir: Path, branch: str) -> bool:
    ref = f"refs/heads/{branch}"
    return git.run(repo_dir, "show-ref", "--verify", "--quiet", ref, check=False).returncode == 0


def purge(path: Path) -> None:
    """Remove ``path`` whatever it is, a tree an overlay left unreadable included."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=_open_and_retry)
    else:
        path.unlink(missing_ok=True)


def _open_and_retry(function: object, name: str, _exc: object) -> None:
    """An overlay's work directory is mode 000: open it up and remove what stopped us."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(name), 0o700)
        os.chmod(name, 0o700)
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, ignore_errors=True)
        else:
            os.unlink(name)
