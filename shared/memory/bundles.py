"""Memory as a git bundle: what a reflection job carries to a worker and brings back.

A job carries memory at one commit as a *snapshot*: a bundle of that commit and its tree,
none of its history (:func:`snapshot`), the same transfer as the depth-1 fetch a
reflection clone used to make from the memory repo itself, so its size is the size of
memory, not of its history. A worker clones it (:func:`clone_snapshot`): the clone's
``shallow`` file names the commit, whose parents it never holds. It answers with a bundle
of the commits it made on top (:func:`bundle_commits`): their objects only, the snapshot
commit its one prerequisite.

Bundles come from the other side of Redis, so they are read as untrusted: the header is
parsed by the harness (:func:`read_header`, bounded) and checked against what is expected
before git reads the pack. A bundle git cannot read is :class:`BundleError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from shared.errors import BundleError
from shared.memory import git

SIGNATURE = b"# v2 git bundle\n"
SNAPSHOT_REF = "refs/heads/memory"
"""The one ref of a snapshot bundle."""
ANSWER_REF = "HEAD"
"""The one ref of an answer bundle: the clone's ``HEAD`` (whatever branch it is on)."""
MAX_HEADER_LINES = 64
MAX_HEADER_LINE = 1024
_SHA = re.compile(rb"^[0-9a-f]{40}$")
_FETCH = ("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules")


@dataclass(frozen=True)
class BundleHeader:
    """What a bundle says it holds: the commits it needs and the refs it brings."""

    prerequisites: list[str]
    refs: list[tuple[str, str]]
    """``(sha, refname)``."""


def snapshot(repo_dir: Path, commit: str) -> bytes:
    """A bundle of ``commit`` alone: the commit and its tree, none of its history."""
    listed = git.run(
        repo_dir, "rev-list", "--objects", "--no-object-names", "--max-count=1", commit
    ).stdout
    # No delta search: one tree holds each file once, so deltas save little (measured on a
    # 10 MB memory: the same 1.5 MB either way) and the search took 2.8 s of 3.2.
    pack = git.run(
        repo_dir,
        "pack-objects",
        "--stdout",
        "-q",
        "--window=0",
        stdin=listed.encode(),
        binary=True,
    ).stdout
    return SIGNATURE + f"{commit} {SNAPSHOT_REF}\n\n".encode() + pack


def bundle_commits(clone_dir: Path, base: str, out: Path) -> int | None:
    """Write a bundle of the clone's ``HEAD`` and what it holds beyond ``base`` to
    ``out``; its size, or None when ``HEAD`` is ``base`` (nothing was committed)."""
    tip = git.run(clone_dir, "rev-parse", "--verify", "HEAD^{commit}").stdout.strip()
    if tip == base:
        return None
    git.run(clone_dir, "bundle", "create", "--quiet", str(out), ANSWER_REF, f"^{base}")
    return out.stat().st_size


def read_header(path: Path) -> BundleHeader:
    """The header of the v2 bundle at ``path``; :class:`BundleError` when it is not one."""
    prerequisites: list[str] = []
    refs: list[tuple[str, str]] = []
    try:
        with open(path, "rb") as bundle:
            if bundle.readline(len(SIGNATURE)) != SIGNATURE:
                raise BundleError("not a git bundle (v2): its first line is wrong")
            for _ in range(MAX_HEADER_LINES):
                line = bundle.readline(MAX_HEADER_LINE)
                if line == b"\n":
                    return BundleHeader(prerequisites, refs)
                if not line.endswith(b"\n"):
                    raise BundleError("the bundle's header is cut short or has a line too long")
                if line.startswith(b"-"):
                    prerequisites.append(_sha(line[1:].split(b" ", 1)[0]))
                else:
                    sha, _, name = line.rstrip(b"\n").partition(b" ")
                    refs.append((_sha(sha), name.decode("utf-8", "replace")))
    except OSError as exc:
        raise BundleError(f"the bundle could not be read: {exc}") from exc
    raise BundleError(f"the bundle's header has more than {MAX_HEADER_LINES} lines")


def _sha(raw: bytes) -> str:
    if not _SHA.match(raw):
        raise BundleError("the bundle's header names something that is not a commit id")
    return raw.decode()


def clone_snapshot(bundle: Path, clone_dir: Path, branch: str) -> str:
    """Fetch the snapshot ``bundle`` into ``clone_dir`` (made by
    :func:`shared.memory.clone.init_clone` with the snapshot's commit as its base) as
    ``branch`` and check it out; the commit. :class:`BundleError` when the bundle is not a
    snapshot or git cannot read it."""
    header = read_header(bundle)
    if header.prerequisites or len(header.refs) != 1 or header.refs[0][1] != SNAPSHOT_REF:
        raise BundleError("the job's memory bundle is not a snapshot of one commit")
    commit = header.refs[0][0]
    shallow = (clone_dir / ".git" / "shallow").read_text(encoding="utf-8").strip()
    if shallow != commit:
        raise BundleError(f"the job's memory bundle holds {commit[:12]}, not {shallow[:12]}")
    fetched = git.run(
        clone_dir, *_FETCH, str(bundle), f"{SNAPSHOT_REF}:refs/heads/{branch}", check=False
    )
    if fetched.returncode != 0:
        raise BundleError(f"the job's memory bundle is damaged: {git.first_line(fetched.stderr)}")
    git.run(clone_dir, "checkout", "--quiet", branch)
    return commit


def fetch_answer(bundle: Path, clone_dir: Path, ref: str) -> str:
    """Fetch an answer ``bundle`` into ``clone_dir`` as ``ref``; the commit it brings.
    :class:`BundleError` when git cannot read it."""
    fetched = git.run(clone_dir, *_FETCH, str(bundle), f"+{ANSWER_REF}:{ref}", check=False)
    if fetched.returncode != 0:
        raise BundleError(f"the worker's bundle is damaged: {git.first_line(fetched.stderr)}")
    return git.run(clone_dir, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.strip()


def stray_objects(repo_dir: Path, tips: list[str]) -> list[str]:
    """Objects of ``repo_dir``'s own store that no commit of ``tips`` reaches (with their
    trees and history): what a bundle brought besides what it says it holds."""
    held = git.run(
        repo_dir,
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname)",
        "--unordered",
    ).stdout.split()
    reached = {
        line.split(" ", 1)[0]
        for line in git.run(repo_dir, "rev-list", "--objects", *tips).stdout.splitlines()
    }
    return sorted(set(held) - reached)
