"""A fake agentd home and a ToolContext over it, with a MemoryEdit that records its calls."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from shared import sandbox
from shared.agent.tools.base import ToolContext
from shared.agent.tools.view import PathView
from shared.errors import LockTimeout, MemoryBusy


@dataclass
class MemoryEditCall:
    message: str
    before: dict[str, str]
    """Memory files (outside .git) and their text when the edit began ..."""
    after: dict[str, str] = field(default_factory=dict)
    """... and when it ended: a write made inside the edit shows up only here."""


class RecordingMemoryEdit:
    """A ``MemoryEdit`` that snapshots the memory dir on entry and exit of each edit."""

    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = memory_dir
        self.calls: list[MemoryEditCall] = []

    @property
    def messages(self) -> list[str]:
        return [call.message for call in self.calls]

    @contextlib.asynccontextmanager
    async def __call__(self, message: str) -> AsyncIterator[None]:
        call = MemoryEditCall(message, self._snapshot())
        self.calls.append(call)
        yield
        call.after = self._snapshot()

    def _snapshot(self) -> dict[str, str]:
        return {
            p.relative_to(self.memory_dir).as_posix(): p.read_text()
            for p in self.memory_dir.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(self.memory_dir).parts
        }


@contextlib.asynccontextmanager
async def memory_lock_never_free(_message: str) -> AsyncIterator[None]:
    """A ``MemoryEdit`` whose lock stays held by someone else until the wait times out."""
    raise LockTimeout("could not lock memory.lock within 120 s; another agentd process holds it")
    yield  # pragma: no cover - never reached, but makes this an async generator


@contextlib.asynccontextmanager
async def commit_refused(_message: str) -> AsyncIterator[None]:
    """A ``MemoryEdit`` that lets the body write, then cannot commit: a live git's lock."""
    yield
    raise MemoryBusy("memory is busy: git lock main.lock is held by a running git process")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """``<home>/agents/a1/{workspace,memory/.git}``, another agent ``a2``, daemon state."""
    home = tmp_path / "home"
    own = home / "agents" / "a1"
    (own / "workspace").mkdir(parents=True)
    (own / "memory" / ".git").mkdir(parents=True)
    (own / "memory" / ".git" / "config").write_text("[core]\n")
    (own / "memory" / "notes.md").write_text("remember\n")
    other = home / "agents" / "a2" / "memory"
    other.mkdir(parents=True)
    (other / "secret.md").write_text("a2's secret\n")
    (home / "agentd.toml").write_text("api_key = 'x'\n")
    return home


@pytest.fixture
def recorder(home: Path) -> RecordingMemoryEdit:
    return RecordingMemoryEdit(home / "agents" / "a1" / "memory")


@pytest.fixture
def ctx(home: Path, recorder: RecordingMemoryEdit) -> ToolContext:
    """The tools on host paths, as the model names them where bash runs bare; the neutral
    names of the sandbox (``/memory``) are tested in test_view.py and tests/security."""
    own = home / "agents" / "a1"
    return ToolContext(
        agent_id="a1",
        workspace=own / "workspace",
        memory_dir=own / "memory",
        memory_edit=recorder,
        view=PathView(),
    )


@pytest.fixture
def make_ctx(ctx: ToolContext) -> Callable[..., ToolContext]:
    """``ctx`` with some fields changed."""

    def make(**changes: Any) -> ToolContext:
        return replace(ctx, **changes)

    return make


NO_BUBBLEWRAP = "sandbox off: bubblewrap (bwrap) is not on PATH; install it"


def fake_no_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process believe bubblewrap does not work on the host."""
    monkeypatch.setattr(sandbox, "_probe", lambda: (False, NO_BUBBLEWRAP))


@pytest.fixture(params=["sandboxed", "unsandboxed"])
def shell_ctx(
    request: pytest.FixtureRequest, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> ToolContext:
    """``ctx`` once in bubblewrap and once on a host without it that allowed bare bash:
    what bash promises about time and processes holds in both."""
    if request.param == "unsandboxed":
        fake_no_bubblewrap(monkeypatch)
        return replace(ctx, bash_unsandboxed=True)
    if not sandbox.available():
        pytest.skip(f"bubblewrap does not work here: {sandbox.reason()}")
    return ctx
