"""What a model calls the directories it works in, and the way back to the host's paths.

In bubblewrap a model's shell sees its places under neutral names — the agent's
workspace at ``/workspace`` and memory at ``/memory``, a reflection's clone at ``/memory``
and its payload under ``/transcript`` — so that nothing it reads there (``pwd``, its
environment, ``/proc/self/mountinfo``, an error message) names the home or the agent's
directory on the host (:mod:`shared.sandbox`). The system prompt and the tools' answers
use the same names, and the file tools, which run outside the sandbox on host paths,
take them: a :class:`PathView` maps one to the other. Where bash runs bare (no
bubblewrap, ``AGENTD_UNSANDBOXED_BASH=1``) there is nothing to hide behind and every name
is the host path itself: the view is the identity.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from shared import sandbox

WORKSPACE = PurePosixPath("/workspace")
MEMORY = PurePosixPath("/memory")
TRANSCRIPTS = PurePosixPath("/transcript")
PROPOSAL = PurePosixPath("/proposal")


@dataclass(frozen=True)
class Place:
    """A host directory and the name the model knows it by."""

    shown: PurePosixPath
    host: Path


@dataclass(frozen=True)
class PathView:
    """The names of a model's places; no places: the host paths themselves."""

    places: tuple[Place, ...] = ()
    home: PurePosixPath | None = None
    """What ``~`` names (the shell's ``$HOME``); None: the host user's home."""

    @classmethod
    def of(cls, *places: tuple[PurePosixPath, Path], sandboxed: bool | None = None) -> PathView:
        """The view of ``places`` (the first one is ``~``) when commands run in bubblewrap
        (``sandboxed``, by default whether it works here), else the identity."""
        if not (sandbox.available() if sandboxed is None else sandboxed):
            return cls()
        return cls(tuple(Place(shown, host.absolute()) for shown, host in places), places[0][0])

    @classmethod
    def for_agent(cls, workspace: Path, memory_dir: Path) -> PathView:
        """The main agent's view: its workspace and its memory checkout."""
        return cls.of((WORKSPACE, workspace), (MEMORY, memory_dir))

    def inside(self, host: Path) -> str:
        """The name of host path ``host`` (or of a path below a place) as the model sees it;
        a path outside every place keeps its host name."""
        for place in sorted(self.places, key=lambda p: len(p.host.parts), reverse=True):
            for root in (place.host, Path(os.path.realpath(place.host))):
                if host.is_relative_to(root):
                    return str(place.shown / host.relative_to(root))
        return str(host)

    def host(self, spelled: str, cwd: Path) -> Path | None:
        """The host path of a path the model spelled (not resolved: links are the
        caller's to follow and check), relative ones from ``cwd``; None for a name no
        place holds."""
        if not self.places:
            path = Path(spelled).expanduser()
            return path if path.is_absolute() else cwd / path
        if (spelled == "~" or spelled.startswith("~/")) and self.home is not None:
            spelled = str(self.home) + spelled[1:]
        name = PurePosixPath(posixpath.normpath(posixpath.join(self.inside(cwd), spelled)))
        if str(name).startswith("//"):  # POSIX leaves a leading // alone; the shell does not
            name = PurePosixPath("/" + str(name).lstrip("/"))
        for place in sorted(self.places, key=lambda p: len(p.shown.parts), reverse=True):
            if name.is_relative_to(place.shown):
                return place.host / name.relative_to(place.shown)
        return None

    def scrub(self, text: str) -> str:
        """``text`` with every host path of a place replaced by its name (a git error that
        names the checkout, an exception's text)."""
        for place in sorted(self.places, key=lambda p: len(p.host.parts), reverse=True):
            for root in {str(Path(os.path.realpath(place.host))), str(place.host)}:
                # The whole path or a path below it, not a longer name it begins.
                text = re.sub(re.escape(root) + r"(?![\w.-])", str(place.shown), text)
        return text


def transcripts_name() -> str | None:
    """What the reflection sub-agent calls the payload directory (``/transcript`` in
    bubblewrap), for the paths a manifest lists; None: its host path, where bash runs bare."""
    return str(TRANSCRIPTS) if sandbox.available() else None


def memory_name(memory_dir: Path) -> str:
    """What the main agent calls its memory checkout (the system prompt's ``<memory dir>``)."""
    return str(MEMORY) if sandbox.available() else str(memory_dir.absolute())
