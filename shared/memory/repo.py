"""One agent's memory repo: every memory edit is a git commit on ``main``.

Git runs through :mod:`shared.memory.git`, the one hardened helper: a hook or
``core.fsmonitor`` a model planted in the repo never runs. Reads that run on every turn
avoid git altogether (:meth:`MemoryRepo.head` reads ``.git`` files) or use one batched call
(:meth:`MemoryRepo.read_tree`).

Writers serialise on a ``flock`` beside the repo (:attr:`MemoryRepo.lock_path`); two writers
in one checkout otherwise collide on ``index.lock``. A commit is refused while a merge, a
revert or a cherry-pick is in progress, because git would happily conclude it with conflict
markers in memory (or seal the user's revert as the agent's edit).

What memory may not hold (:mod:`shared.memory.content`) is dealt with before git stages
anything, and so before ``git add`` could descend into a nested repository and obey its
config. Who wrote decides how (:data:`Writer`): the agent's nested repositories and the
files it made or grew past a limit are taken out of the checkout (a nested ``.git`` is
deleted, an oversized file put back as it was at HEAD, or deleted if it is new), the rest
of its change is committed, and the typed error tells the model what was refused. Left in
place, they would fail every later commit and hold reflection back (a dirty checkout).
A user's commit is refused whole while a nested repository is there (the user decides
what to do with it); a user's oversized file is committed, and ``agentctl status`` and
``agentd doctor`` report it (:mod:`shared.memory.screen`).

A git lock file left by a git that died is removed and the command run again; one a live
git holds is :class:`MemoryBusy` (:mod:`shared.memory.git_locks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Self, TypeVar

import structlog

from shared.errors import MemoryContentError, MemoryPathError, MemoryRepoError
from shared.memory import content, frontmatter, git, git_locks, screen
from shared.memory.content import MemoryLimits
from shared.memory.screen import Writer
from shared.store.layout import memory_lock
from shared.store.locks import async_file_lock

log = structlog.get_logger(__name__)

INITIAL_COMMIT_MESSAGE = "chore: initialize local memory"
_BRANCH = "main"
_LOG_FORMAT = "%H%x00%h%x00%an%x00%ae%x00%aI%x00%s"
_FILE_MODES = frozenset({b"100644", b"100755"})
_UNFINISHED = {"MERGE_HEAD": "merge", "REVERT_HEAD": "revert", "CHERRY_PICK_HEAD": "cherry-pick"}
"""What git leaves in ``.git`` while each operation that can stop on a conflict is unfinished;
``git <operation> --abort`` puts the checkout back at HEAD as it was before it."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    short_sha: str
    author: str
    email: str
    date: str
    """Author date, strict ISO 8601 with offset."""
    subject: str


@dataclass(slots=True)
class Edit:
    """What one :meth:`MemoryRepo.edit` did to HEAD, read while it held the memory lock.

    Read under the lock, so a commit that lands while the edit waits for the lock (a
    reflection merge) shows as ``before`` differing from what the caller saw earlier."""

    before: str
    """HEAD when the lock was taken."""
    after: str | None = None
    """HEAD once the block's changes are committed (``before`` if nothing changed)."""
    undo: Callable[[], None] | None = None
    """Set by a block that knows what it wrote: puts the checkout back as it was if the
    commit fails (a full disk, content refused), still under the lock, so the next
    unrelated edit does not commit it."""


def validate_memory_path(path: str) -> str:
    """Return ``path`` normalised if it names a place inside the repo's tracked tree.

    Refuses absolute paths, ``..`` segments and anything under ``.git``: the path comes from
    a model or a user and must not reach outside memory or into git's own files.
    """
    pure = PurePosixPath(path)
    if "\0" in path or not pure.parts or pure.is_absolute() or {"..", ".git"} & set(pure.parts):
        raise MemoryPathError(
            f"memory path {path!r} is not allowed: use a path relative to the memory "
            "directory, without '..' or '.git' (e.g. 'system/human.md')"
        )
    return str(pure)


class MemoryRepo:
    """A memory repo's main checkout. ``with`` is kept for callers' scoping; nothing
    stays open between git commands."""

    def __init__(self, path: Path, *, limits: MemoryLimits | None = None) -> None:
        self.path = path.absolute()
        self.limits = limits or MemoryLimits()
        """The size limits the agent's commits keep to (the daemon's settings)."""
        self._git_dir = self.path / ".git"
        if not self._git_dir.is_dir() or not (self._git_dir / "HEAD").is_file():
            raise MemoryRepoError(
                f"{self.path} is not a memory repository (no .git directory with a HEAD); "
                "it is created with the agent"
            )

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        agent_id: str,
        agent_name: str,
        persona: str,
        human: str,
        limits: MemoryLimits | None = None,
    ) -> MemoryRepo:
        """Initialise a repo at ``path`` with ``system/persona.md`` and ``system/human.md``."""
        if (path / ".git").exists():
            raise MemoryRepoError(
                f"{path} already holds a git repository; refusing to re-initialise memory"
            )
        path.mkdir(parents=True, exist_ok=True)
        git.run(path, "init", "--quiet", "--template=", f"--initial-branch={_BRANCH}")
        repo = cls(path, limits=limits)
        try:
            email = f"{agent_id}@agentd.local"
            repo.configure(agent_name, email)
            repo._write_system_file("persona", "Who I am and how I behave.", persona)
            repo._write_system_file("human", "What I know about the user.", human)
            repo.commit_all(
                INITIAL_COMMIT_MESSAGE, author_name=agent_name, author_email=email, by="user"
            )
        except BaseException:
            repo.close()
            raise
        log.info("memory_repo_created", path=str(repo.path), agent_id=agent_id)
        return repo

    def close(self) -> None:
        """Nothing to release: every git command is its own process."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def lock_path(self) -> Path:
        """The memory lock: a sibling of the repo, so it never shows up as untracked."""
        return memory_lock(self.path)

    def head(self) -> str:
        """The sha HEAD points at, read from ``.git`` files (no git process: every turn).

        Every step of every turn asks, on the daemon's event loop, so this makes as few
        system calls as it can: each is a moment the loop may wait to run again."""
        content = _read_small(self._git_dir / "HEAD")
        if content is None:
            raise MemoryRepoError(f"{self.path}: .git/HEAD is missing")
        if not content.startswith("ref: "):
            return content
        ref = content.removeprefix("ref: ")
        loose = _read_small(self._git_dir / ref)
        if loose:
            return loose
        sha = self._packed_ref(ref)
        if sha is None:
            raise MemoryRepoError(f"{self.path}: HEAD points to {ref}, which has no commit")
        return sha

    def commit_all(
        self,
        message: str,
        *,
        author_name: str,
        author_email: str,
        by: Writer = "agent",
        concludes_revert: bool = False,
    ) -> str | None:
        """Stage everything and commit it; the new sha, or None when nothing changed.

        The caller holds :attr:`lock_path` (see :meth:`edit`). Refused while a merge, revert
        or cherry-pick is unfinished (see :meth:`recover`), except the revert a caller
        started itself and saw apply cleanly (``concludes_revert``, :mod:`shared.memory.revert`).
        Content memory may not hold is dealt with first, as ``by`` says (:data:`Writer`):
        :class:`MemoryContentError` is raised, for the agent once the rest is committed.
        """
        sha, refused = self._commit(message, author_name, author_email, by, concludes_revert)
        if refused is not None:
            raise refused
        return sha

    def _commit(
        self, message: str, author_name: str, author_email: str, by: Writer, revert: bool
    ) -> tuple[str | None, MemoryContentError | None]:
        for marker, operation in _UNFINISHED.items():
            if (self._git_dir / marker).exists() and not (revert and marker == "REVERT_HEAD"):
                raise MemoryRepoError(
                    f"a {operation} is in progress in {self.path}; committing now would seal "
                    f"its half-done changes (conflict markers and all) into memory. Run "
                    f"`git -C {self.path} {operation} --abort` (agentd does this on restart) "
                    "and retry"
                )
        refused = screen.screen(self.path, self.limits, by)
        self._git("add", "-A")
        if self._git_status("diff", "--cached", "--quiet") == 0:
            return None, refused
        self._git("commit", "-q", "-m", message, f"--author={author_name} <{author_email}>")
        return self.head(), refused

    @contextlib.asynccontextmanager
    async def edit(
        self, message: str, *, author_name: str, author_email: str, by: Writer = "agent"
    ) -> AsyncIterator[Edit]:
        """Hold the memory lock for the body, then commit what it changed as ``message``.

        Yields the :class:`Edit`, whose ``after`` is set once the commit is made. The commit
        runs in a thread so the event loop keeps serving other agents. Nothing is committed
        if the body raises; if the commit fails, the body's :attr:`Edit.undo` runs. Content
        memory may not hold is dealt with as ``by`` says (:meth:`commit_all`); its
        :class:`MemoryContentError` is raised once ``after`` is set (for the agent, the rest
        of the change is committed by then). A user's edit while a nested repository is in
        the checkout is refused before the body runs.
        """
        async with async_file_lock(self.lock_path):
            if by == "user":  # refused before the body writes anything
                screen.refuse_nested(await asyncio.to_thread(content.read_checkout, self.path))
            change = Edit(before=self.head())
            yield change
            try:
                sha, refused = await _run_to_completion(
                    asyncio.to_thread(self._commit, message, author_name, author_email, by, False)
                )
            except BaseException:
                if change.undo is not None and self.head() == change.before:
                    await _run_to_completion(asyncio.to_thread(change.undo))
                raise
            change.after = self.head()
        # The message may quote a tool's arguments (``bash: <command>``): debug only.
        if sha is None:
            log.debug("memory_edit_unchanged", path=str(self.path), message=message)
        else:
            log.info("memory_committed", path=str(self.path), sha=sha)
            log.debug("memory_commit_message", sha=sha, message=message)
        if refused is not None:
            raise refused

    def is_dirty(self) -> bool:
        """Whether the checkout differs from HEAD, untracked files included."""
        return bool(self.uncommitted())

    def uncommitted(self) -> list[str]:
        """Paths that differ from HEAD in the checkout, untracked files included. A query
        only: git does not refresh the index for it (``agentd doctor`` writes nothing)."""
        output = self._git(
            "--no-optional-locks",
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        )
        return sorted({entry[3:] for entry in output.split("\0") if len(entry) > 3})

    def log(self, limit: int = 20) -> list[CommitInfo]:
        """The last ``limit`` commits of HEAD, newest first."""
        output = self._git("log", f"-n{limit}", f"--format={_LOG_FORMAT}")
        return [CommitInfo(*line.split("\0")) for line in output.split("\n") if line]

    def changed_files(self, old: str, new: str) -> list[str]:
        """Paths that differ between commits ``old`` and ``new``, sorted.

        An ``old`` that no longer resolves (garbage-collected, or from another repo) counts
        as "everything changed": every file at ``new``.
        """
        _check_rev(old)
        _check_rev(new)
        if self._git_status("cat-file", "-e", f"{old}^{{commit}}") != 0:
            output = self._git("ls-tree", "-r", "-z", "--name-only", new)
        else:
            output = self._git("diff", "--name-only", "--no-renames", "-z", old, new)
        return sorted(name for name in output.split("\0") if name)

    def read_tree(self, rev: str = "HEAD") -> dict[str, str]:
        """Every committed ``*.md`` file at ``rev`` by path; the checkout is never read."""
        _check_rev(rev)
        listing = self._git_bytes("ls-tree", "-r", "-z", rev).stdout
        blobs: dict[str, bytes] = {}
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            info, name = entry.split(b"\t", 1)
            mode, kind, sha = info.split(b" ")
            if kind == b"blob" and mode in _FILE_MODES and name.endswith(b".md"):
                blobs[name.decode("utf-8", "replace")] = sha
        contents = self._cat_blobs(list(blobs.values()))
        return {path: contents[blobs[path]] for path in sorted(blobs)}

    def show(self, path: str, rev: str = "HEAD") -> str:
        """The committed text of memory file ``path`` at ``rev``."""
        path = validate_memory_path(path)
        _check_rev(rev)
        shown = self._git_bytes("cat-file", "blob", f"{rev}:{path}", check=False)
        if shown.returncode == 0:
            return shown.stdout.decode("utf-8", "replace")
        if self._git_status("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}") != 0:
            raise MemoryRepoError(f"{self.path}: unknown revision {rev!r}")
        raise MemoryPathError(
            f"no memory file {path!r} at {rev}; list the files with `agentctl memory show`"
        )

    def recover(self) -> list[str]:
        """Undo what a killed git left behind; what was done, also logged. Hold the lock.

        Removes the git lock files no live git holds (any of them: index, HEAD, refs,
        linked worktrees'), then aborts a merge, revert or cherry-pick left unfinished: the
        checkout goes back to HEAD, which such an operation only moves once it is done.
        """
        done = [
            f"removed a stale {lock.relative_to(self.path)}"
            for lock in git_locks.remove_stale(self._git_dir)
        ]
        for marker, operation in _UNFINISHED.items():
            if (self._git_dir / marker).exists():
                self._git(operation, "--abort")
                done.append(f"aborted an unfinished {operation}")
                log.warning("memory_repo_recovered", path=str(self.path), action=done[-1])
        return done

    def ensure_unlocked(self) -> None:
        """Make sure no git lock stands in the way of changing the checkout; hold the lock.

        For commands that would stop halfway if they met a lock: a fast-forward that finds
        ``refs/heads/main.lock`` has already rewritten the index and files when it fails.
        Stale locks are removed; a live git's lock on the checkout's own files (index,
        HEAD, the checked-out branch, …) raises :class:`MemoryBusy` with nothing changed.
        """
        git_locks.remove_stale(self._git_dir)
        checkout_locks = [*self._git_dir.glob("*.lock"), self._git_dir / f"{self._head_ref()}.lock"]
        for lock in checkout_locks:
            if lock.exists():
                raise git_locks.busy(lock)

    def configure(self, agent_name: str, email: str) -> None:
        """The repo's own settings: who commits, and nothing git would do on its own
        (signing, auto gc). Set when the repo is created or imported."""
        git.write_config(self.path, agent_name, email)

    def _write_system_file(self, name: str, description: str, body: str) -> None:
        target = self.path / "system" / f"{name}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        meta: frontmatter.Meta = {"name": name, "description": description}
        target.write_text(frontmatter.render(meta, body.strip() + "\n"), encoding="utf-8")

    def _head_ref(self) -> str:
        """The ref HEAD points at (``refs/heads/main``), or ``HEAD`` itself when detached."""
        content = (self._git_dir / "HEAD").read_text().strip()
        return content.removeprefix("ref: ") if content.startswith("ref: ") else "HEAD"

    def _packed_ref(self, ref: str) -> str | None:
        packed = self._git_dir / "packed-refs"
        if not packed.is_file():
            return None
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and not line.startswith(("#", "^")):
                return sha
        return None

    def _cat_blobs(self, shas: list[bytes]) -> dict[bytes, str]:
        """Contents of blobs ``shas`` from a single ``git cat-file --batch``."""
        if not shas:
            return {}
        output = self._git_bytes("cat-file", "--batch", stdin=b"\n".join(shas) + b"\n").stdout
        contents: dict[bytes, str] = {}
        pos = 0
        while pos < len(output):
            header_end = output.index(b"\n", pos)
            sha, _kind, size = output[pos:header_end].split(b" ")
            start = header_end + 1
            contents[sha] = output[start : start + int(size)].decode("utf-8", "replace")
            pos = start + int(size) + 1
        return contents

    def _git(self, *args: str) -> str:
        """Run ``git args`` here and return its output; a failure is MemoryRepoError."""
        return git.run(self.path, *args).stdout

    def _git_bytes(
        self, *args: str, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return git.run(self.path, *args, check=check, stdin=stdin, binary=True)

    def _git_status(self, *args: str) -> int:
        """Run a git command whose exit code is the answer (``diff --quiet``, ``cat-file -e``)."""
        return git.run(self.path, *args, check=False).returncode


def _check_rev(rev: str) -> None:
    if not rev or rev.startswith("-"):
        raise MemoryRepoError(f"invalid revision {rev!r}")


async def _run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if we are cancelled meanwhile, then re-raise.

    A cancelled turn must not release the memory lock while its commit still runs in a
    thread: the next writer would collide with it on ``index.lock``.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


def _read_small(path: Path) -> str | None:
    """A small file's text, stripped, in three system calls; None if it is not a file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        return os.read(descriptor, 4096).decode().strip()
    except IsADirectoryError:
        return None
    finally:
        os.close(descriptor)
