"""Who a memory commit says it is from: the harness decides, never the model's own words.

A model that commits (the reflection sub-agent in its clone, the agent reviewing a proposal
in explicit merge mode) chooses its commits' author, committer and message, trailers
included, and git records whatever it was told: an attack run committed as ``user`` with
an ``Edited-By: user`` trailer, and ``memory blame`` credited the user with a line the
model made up. So nothing a model committed lands as it is. :func:`resign` rebuilds each
of its commits with ``git commit-tree`` (no checkout, no index, nothing that reads
attributes or runs a filter): the same tree and the same shape (parents mapped old to new,
so a merge inside the branch stays a merge), author and committer set to the identity the
harness names, dated when it lands (a model may forge dates too), and a message that keeps
the model's subject and body without any line claiming an origin, ending in the harness's
own trailers.

Origin-claiming lines are dropped, not refused: the reflection prompt itself asks an honest
model to write this job's trailers, and failing every such run would punish the honest
ones. Dropping them is enough, since provenance reads only the last paragraph, which is
always the harness's; dropping them also keeps a reader of ``git log`` from being misled.

The same rule covers every message a model's text reaches: :func:`one_line` makes a
tool's description of its change (``bash: <command>``, a file path) a single line before
the harness appends its trailers, so no newline can start a paragraph of its own, and no
scissors line (``# ---- >8 ----``, after which git's trailer parser stops reading) can
hide the harness's trailers behind one the model wrote.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import TooManyCommits
from shared.memory import git
from shared.memory.provenance import (
    AGENT_ID,
    CONVERSATION_ID,
    EDITED_BY,
    JOB_ID,
    MCP_CLIENT,
    MESSAGE_ID,
    PARENT_AGENT_ID,
    REFLECTED_MESSAGES,
    REVERTS,
    VIA,
    with_trailers,
)

FALLBACK_SUBJECT = "memory update (no message given)"
MAX_MESSAGE_CHARS = 4000
"""A commit message is a note on the change; anything longer is cut (at a line)."""
MAX_SUBJECT_CHARS = 200

ORIGIN_KEYS = frozenset(
    key.casefold()
    for key in (
        AGENT_ID,
        PARENT_AGENT_ID,
        CONVERSATION_ID,
        MESSAGE_ID,
        REFLECTED_MESSAGES,
        JOB_ID,
        EDITED_BY,
        REVERTS,
        VIA,
        MCP_CLIENT,
        "Author",
        "Committer",
        "From",
        "Reflection-Subagent-ID",
    )
)
"""Trailer keys that say who made a commit or from what; besides these, every key ending in
``-by`` (``Signed-off-by``, ``Co-authored-by``) or ``-id`` claims an origin too."""
_TRAILER_LINE = re.compile(r"^\s*(?P<key>[A-Za-z0-9][A-Za-z0-9-]*)\s*:")
_SCISSORS = re.compile(r"^\S?\s*-+\s*>8\s*-+\s*$")
"""git's cut line (``# ------------------------ >8 ------------------------``): its
trailer parser ignores everything after it, the harness's trailers included."""
_BLANK_RUNS = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class Signature:
    """Who the harness says made the commits it lands, and the trailers that say from what."""

    name: str
    email: str
    trailers: Mapping[str, str | None] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Author and committer for ``git commit-tree``; the date is the landing's."""
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }


def claims_origin(line: str) -> bool:
    """Whether ``line`` is a trailer saying who made a commit or from what."""
    match = _TRAILER_LINE.match(line)
    if match is None:
        return False
    key = match["key"].casefold()
    return key in ORIGIN_KEYS or key.endswith(("-by", "-id"))


def one_line(text: str, limit: int = MAX_SUBJECT_CHARS) -> str:
    """``text`` as one line of printable text: every run of whitespace (newlines included)
    one space, control characters gone, at most ``limit`` characters."""
    return " ".join(_printable(text, keep="\n\r\t").split())[:limit]


def clean_message(text: str) -> str:
    """A model's commit message, with nothing in it that claims an origin or could hide
    the trailers the harness appends: control characters, origin trailers, cut lines and
    runs of blank lines gone, at most :data:`MAX_MESSAGE_CHARS`; never empty."""
    text = _printable(text.replace("\r\n", "\n").replace("\r", "\n"), keep="\n\t")
    lines = [line.rstrip() for line in text.split("\n")]
    kept = [line for line in lines if not claims_origin(line) and not _SCISSORS.match(line)]
    body = _BLANK_RUNS.sub("\n\n", "\n".join(kept)).strip("\n")
    if len(body) > MAX_MESSAGE_CHARS:
        body = body[:MAX_MESSAGE_CHARS].rsplit("\n", 1)[0]
    subject, newline, rest = body.partition("\n")
    subject = one_line(subject) or FALLBACK_SUBJECT
    return subject + newline + rest if rest.strip() else subject


def signed_message(text: str, signature: Signature) -> str:
    """A model's message cleaned (:func:`clean_message`), ending in the harness's trailers."""
    return with_trailers(clean_message(text), signature.trailers)


def resign(
    repo_dir: Path,
    tip: str,
    *,
    exclude: Sequence[str],
    signature: Signature,
    max_commits: int,
) -> tuple[str, list[str]]:
    """Rebuild under ``signature`` every commit of ``tip``'s history that is not in
    ``exclude``'s; the commit now standing for ``tip`` (``tip`` itself if nothing was
    rebuilt) and the rebuilt commits, oldest first.

    Parents are mapped old to new, so the rebuilt history has the same shape and trees.
    More than ``max_commits`` to rebuild is :class:`TooManyCommits`, nothing written: a
    reflection makes a handful, and each costs a git process."""
    listed = git.run(
        repo_dir, "rev-list", "--topo-order", "--reverse", tip, "--not", *exclude
    ).stdout.split()
    if len(listed) > max_commits:
        raise TooManyCommits(
            f"the branch holds {len(listed)} new commits, over the {max_commits} one "
            "reflection may land; nothing of it was taken"
        )
    raw = _read_commits(repo_dir, listed)
    rebuilt: dict[str, str] = {}
    for sha in listed:
        tree, parents, message = raw[sha]
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", rebuilt.get(parent, parent)]
        made = git.run(
            repo_dir, *args, stdin=signed_message(message, signature), env=signature.env()
        )
        rebuilt[sha] = made.stdout.strip()
    return rebuilt.get(tip, tip), list(rebuilt.values())


def _read_commits(repo_dir: Path, shas: list[str]) -> dict[str, tuple[str, list[str], str]]:
    """Each commit's tree, parents and message, from one ``git cat-file --batch``."""
    if not shas:
        return {}
    output = git.run(
        repo_dir, "cat-file", "--batch", stdin=("\n".join(shas) + "\n").encode(), binary=True
    ).stdout
    found: dict[str, tuple[str, list[str], str]] = {}
    pos = 0
    while pos < len(output):
        header_end = output.index(b"\n", pos)
        sha, _kind, size = output[pos:header_end].split(b" ")
        start = header_end + 1
        body = output[start : start + int(size)]
        pos = start + int(size) + 1
        headers, _, message = body.partition(b"\n\n")
        tree, parents = "", []
        for line in headers.split(b"\n"):
            name, _, value = line.partition(b" ")
            if name == b"tree":
                tree = value.decode()
            elif name == b"parent":
                parents.append(value.decode())
        found[sha.decode()] = (tree, parents, message.decode("utf-8", "replace"))
    return found


def _printable(text: str, keep: str = "") -> str:
    return "".join(
        char for char in text if char in keep or unicodedata.category(char) not in ("Cc", "Cs")
    )
