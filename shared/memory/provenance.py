"""Where a memory line came from: every memory commit says who made it and from what.

Each writer of memory ends its commit message with git trailers (``Key: value`` lines in
the message's last paragraph), and :class:`Provenance` reads them back:

- a **turn** edit (the agent's tool in a chat turn): ``Agent-ID``, ``Conversation-ID`` and
  ``Message-ID``, the assistant message holding the tool call;
- a **reflection** commit (the sub-agent, in its clone): ``Agent-ID`` (the sub-agent),
  ``Parent-Agent-ID``, ``Reflected-Messages: <first id>..<last id>`` and ``Job-ID``,
  written by the harness as the commit lands, whatever the model wrote
  (:mod:`shared.memory.signing`); a follow-up the agent commits while it reviews a
  proposal (explicit merge mode): ``Agent-ID`` (the agent) and ``Job-ID``;
- a reflection's **merge** commit (``--no-ff``, when memory moved meanwhile, or always in
  explicit merge mode): ``Job-ID``;
- a **user** edit (``agentctl memory edit``/``commit``/``revert``): ``Edited-By: user``, and
  for a revert ``Reverts: <sha>``. The trailer, not the author, says "user": the author
  ``user <user@agentd.local>`` only identifies commits made before trailers existed;
- a **note** remembered or lines forgotten (``agentctl remember``/``forget``, the web view):
  ``Edited-By: user`` and ``Via: agentctl`` (or ``web``); a note an MCP host's ``remember``
  tool sent (``agentctl mcp``): ``Edited-By: mcp``, ``Via: mcp`` and ``MCP-Client: <the
  name and version the host gave>``. Its kind is ``mcp``: another application's model
  chose those words, not the user at agentd's own doors.

Commits without trailers (made before them, or by hand with git) still parse: their kind
is inferred from the parents, author and subject (:meth:`Provenance.infer`). A trailer
value that is not a well-formed id is dropped, never shown: a model wrote some of these.

:func:`blame` answers "which commit last wrote each line". It is ``git blame`` on the
whole history, not ``--first-parent``: git already passes a line through a merge to the
side that brought it, so a reflection's line names the reflection commit. A merge is
named only for a line the merge itself wrote (a resolved conflict in an explicit merge);
then the newest commit the merge brought in that touched the file answers instead,
because that is the change the line was resolved from.

Everything here blocks on git subprocesses: call it in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.errors import MemoryPathError, UnknownRevision
from shared.ids import ID_PATTERN
from shared.memory import git
from shared.memory.repo import INITIAL_COMMIT_MESSAGE, MemoryRepo, validate_memory_path

ProvenanceKind = Literal["turn", "reflection", "user", "mcp", "merge", "initial"]
Via = Literal["agentctl", "web", "mcp"]
"""The door a note came in through (``agentctl remember``, the web view, ``agentctl mcp``)."""

AGENT_ID = "Agent-ID"
PARENT_AGENT_ID = "Parent-Agent-ID"
CONVERSATION_ID = "Conversation-ID"
MESSAGE_ID = "Message-ID"
REFLECTED_MESSAGES = "Reflected-Messages"
JOB_ID = "Job-ID"
EDITED_BY = "Edited-By"
REVERTS = "Reverts"
VIA = "Via"
MCP_CLIENT = "MCP-Client"

USER_NAME = "user"
USER_EMAIL = "user@agentd.local"
"""The author of every memory commit the user makes through agentd."""
MCP_NAME = "mcp"
MCP_EMAIL = "mcp@agentd.local"
"""The author of a note an MCP host sent, and its ``Edited-By`` value."""

_REFLECTION_EMAIL = re.compile(r"~reflection@")
"""The sub-agent's author email (``<agent>~reflection@agentd.local``), for old commits."""
_REFLECTION_SUBJECT = re.compile(r"^\w+\(reflection\)!?:")
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_RECORD = "\x1e"
_FORMAT = "%H%x00%h%x00%aI%x00%an%x00%ae%x00%P%x00%s%x00%(trailers:only,unfold)" + "%x1e"
_MAX_REV_CHARS = 200
_CLIENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+/@()-]{0,99}")
"""An MCP host's name and version as a trailer keeps it: a host names itself, so the
value is checked like an id, and anything else is left out."""
_VIAS: dict[str, Via] = {"agentctl": "agentctl", "web": "web", "mcp": "mcp"}


class Provenance(BaseModel):
    """Who made one memory commit, and from which messages."""

    model_config = ConfigDict(frozen=True)

    kind: ProvenanceKind
    agent_id: str | None = None
    """The agent whose turn made the edit, or the reflection sub-agent (``…~reflection``)."""
    conversation_id: str | None = None
    message_id: str | None = None
    """For a turn edit: the assistant message holding the tool call that made it."""
    job_id: str | None = None
    """For a reflection (and its merge): the reflection job."""
    reflected_first: str | None = None
    reflected_last: str | None = None
    """For a reflection: the first and last message ids of the slice it reviewed."""
    reverts: str | None = None
    """For a revert: the sha of the commit it undid."""
    via: Via | None = None
    """For a note remembered or lines forgotten: the door it came in through."""
    client: str | None = None
    """For a note sent over MCP: the host's name and version, as it introduced itself."""

    @classmethod
    def infer(
        cls,
        trailers: Mapping[str, str],
        *,
        parents: int,
        author_name: str,
        author_email: str,
        subject: str,
    ) -> Provenance:
        """The provenance of a commit from its trailers, else its shape and author."""
        first, last = _reflected_range(trailers.get(REFLECTED_MESSAGES))
        fields = {
            "agent_id": _agent_id(trailers.get(AGENT_ID)),
            "conversation_id": _id(trailers.get(CONVERSATION_ID)),
            "message_id": _id(trailers.get(MESSAGE_ID)),
            "job_id": _id(trailers.get(JOB_ID)),
            "reflected_first": first,
            "reflected_last": last,
            "reverts": _sha(trailers.get(REVERTS)),
            "client": mcp_client(trailers.get(MCP_CLIENT)),
        }
        kind = _kind(trailers, parents, author_name, author_email, subject, fields)
        return cls(kind=kind, via=_via(trailers.get(VIA)), **fields)


class CommitProvenance(BaseModel):
    """One memory commit as provenance shows it."""

    model_config = ConfigDict(frozen=True)

    sha: str
    short_sha: str
    authored_at: datetime
    """The author date, with the offset it was recorded in (aware)."""
    author: str
    subject: str
    parents: list[str]
    provenance: Provenance


class BlamedLine(BaseModel):
    """One line of a memory file and the commit that last wrote it."""

    model_config = ConfigDict(frozen=True)

    line_no: int
    """1-based."""
    text: str
    commit: CommitProvenance


class FoundLine(BaseModel):
    """A memory line that matched a search, with its file."""

    model_config = ConfigDict(frozen=True)

    path: str
    line: BlamedLine


def with_trailers(message: str, trailers: Mapping[str, str | None]) -> str:
    """``message`` ending in a paragraph of ``Key: value`` trailers (``None`` values left
    out), the form git's ``%(trailers)`` reads back."""
    lines = [f"{key}: {value}" for key, value in trailers.items() if value is not None]
    return f"{message.rstrip()}\n\n" + "\n".join(lines) if lines else message


def turn_trailers(
    agent_id: str, conversation_id: str, message_id: str | None
) -> dict[str, str | None]:
    """The trailers of an edit a chat turn's tool makes: ``message_id`` is the assistant
    message holding the tool call."""
    return {AGENT_ID: agent_id, CONVERSATION_ID: conversation_id, MESSAGE_ID: message_id}


def user_trailers(reverts: str | None = None) -> dict[str, str | None]:
    """The trailers of a commit the user makes through agentd."""
    return {EDITED_BY: USER_NAME, REVERTS: reverts}


def note_trailers(via: Via, client: str | None = None) -> dict[str, str | None]:
    """The trailers of a note remembered or lines forgotten through ``via``; ``client`` is
    an MCP host's name and version (kept only for ``mcp``, and only as :func:`mcp_client`
    allows)."""
    if via == "mcp":
        return {EDITED_BY: MCP_NAME, VIA: via, MCP_CLIENT: mcp_client(client)}
    return {EDITED_BY: USER_NAME, VIA: via}


def mcp_client(value: str | None) -> str | None:
    """``value`` if it is a name and version a trailer may hold, else None."""
    if value is None:
        return None
    value = " ".join(value.split())
    return value if _CLIENT.fullmatch(value) else None


def resolve_commit(repo: MemoryRepo, rev: str) -> str:
    """The full sha of the commit ``rev`` names (``HEAD~1``, a short sha, …).

    Refused as :class:`UnknownRevision`: an option-like or path-like revision
    (``--all``, ``HEAD:system/human.md``), and one that names no commit of this repo.
    """
    if not rev or len(rev) > _MAX_REV_CHARS or rev.startswith("-") or ":" in rev or "\0" in rev:
        raise UnknownRevision(
            f"{rev[:80]!r} is not a memory revision: give a commit sha (as `agentctl memory "
            "log` shows it) or a name like HEAD~1"
        )
    found = git.run(
        repo.path,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{rev}^{{commit}}",
        check=False,
    )
    sha = found.stdout.strip()
    if found.returncode != 0 or not _SHA.fullmatch(sha):
        raise UnknownRevision(
            f"no commit {rev!r} in this agent's memory; list its commits with `agentctl memory log`"
        )
    return sha


def commit_provenance(repo: MemoryRepo, sha: str) -> CommitProvenance:
    """The provenance of the commit ``sha`` (any revision :func:`resolve_commit` takes)."""
    full = resolve_commit(repo, sha)
    return _read_commits(repo, [full])[full]


def recent_commits(repo: MemoryRepo, limit: int = 20, rev: str = "HEAD") -> list[CommitProvenance]:
    """The newest ``limit`` commits reachable from ``rev``, newest first."""
    output = git.run(
        repo.path, "log", f"-n{limit}", f"--format={_FORMAT}", resolve_commit(repo, rev)
    )
    return [_parse_record(record) for record in _records(output.stdout)]


def commits_between(repo: MemoryRepo, old: str, new: str = "HEAD") -> list[CommitProvenance]:
    """The commits reachable from ``new`` but not from ``old``, newest first."""
    old_sha, new_sha = resolve_commit(repo, old), resolve_commit(repo, new)
    output = git.run(repo.path, "log", f"--format={_FORMAT}", f"{old_sha}..{new_sha}")
    return [_parse_record(record) for record in _records(output.stdout)]


def blame(repo: MemoryRepo, path: str, rev: str = "HEAD") -> list[BlamedLine]:
    """Every line of memory file ``path`` at ``rev`` with the commit that last wrote it
    (through reflection merges, see the module docstring)."""
    path = validate_memory_path(path)
    sha = resolve_commit(repo, rev)
    proc = git.run(repo.path, "blame", "--porcelain", sha, "--", path, check=False, binary=True)
    if proc.returncode != 0:
        raise MemoryPathError(
            f"no memory file {path!r} at {rev}; list the files with `agentctl memory show`"
        )
    blamed = _parse_porcelain(proc.stdout.decode("utf-8", "replace"))
    commits = _read_commits(repo, list(dict.fromkeys(line_sha for _, line_sha, _ in blamed)))
    behind = {
        merge: _behind_merge(repo, commit, path)
        for merge, commit in commits.items()
        if commit.provenance.kind == "merge"
    }
    extra = [s for s in behind.values() if s is not None and s not in commits]
    commits.update(_read_commits(repo, extra))
    return [
        BlamedLine(line_no=line_no, text=text, commit=commits[behind.get(line_sha) or line_sha])
        for line_no, line_sha, text in blamed
    ]


def find_lines(repo: MemoryRepo, text: str, rev: str = "HEAD") -> list[FoundLine]:
    """The lines of every memory file at ``rev`` that contain ``text`` (case-insensitive,
    blank text matches nothing), each blamed; in path and line order."""
    needle = text.strip().casefold()
    if not needle:
        return []
    sha = resolve_commit(repo, rev)
    found: list[FoundLine] = []
    for path, content in repo.read_tree(sha).items():
        if needle not in content.casefold():
            continue
        found += [
            FoundLine(path=path, line=line)
            for line in blame(repo, path, sha)
            if needle in line.text.casefold()
        ]
    return found


# --- parsing ----------------------------------------------------------------------------


def _kind(
    trailers: Mapping[str, str],
    parents: int,
    author_name: str,
    author_email: str,
    subject: str,
    fields: Mapping[str, str | None],
) -> ProvenanceKind:
    if parents > 1:
        return "merge"
    if fields["reflected_first"] or fields["job_id"]:
        return "reflection"
    if trailers.get(EDITED_BY) == USER_NAME:
        return "user"
    if trailers.get(EDITED_BY) == MCP_NAME:
        return "mcp"
    if fields["conversation_id"] or fields["message_id"]:
        return "turn"
    # no trailers: a commit made before they existed
    if parents == 0:
        return "initial"
    if author_email == USER_EMAIL and author_name == USER_NAME:
        return "user"
    if _REFLECTION_EMAIL.search(author_email) or _REFLECTION_SUBJECT.match(subject):
        return "reflection"
    if subject == INITIAL_COMMIT_MESSAGE:
        return "initial"
    return "turn"


def _id(value: str | None) -> str | None:
    return value if value is not None and ID_PATTERN.fullmatch(value) else None


def _agent_id(value: str | None) -> str | None:
    if value is None:
        return None
    return value if _id(value.removesuffix("~reflection")) else None


def _sha(value: str | None) -> str | None:
    return value if value is not None and _SHA.fullmatch(value) else None


def _via(value: str | None) -> Via | None:
    return _VIAS.get(value) if value is not None else None


def _reflected_range(value: str | None) -> tuple[str | None, str | None]:
    first, dots, last = (value or "").partition("..")
    if not dots or _id(first) is None or _id(last) is None:
        return None, None
    return first, last


def _trailers(text: str) -> dict[str, str]:
    """``Key: value`` lines; the last value of a repeated key wins."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() and value.strip():
            found[key.strip()] = value.strip()
    return found


def _records(output: str) -> Iterable[str]:
    for record in output.split(_RECORD):
        record = record.lstrip("\n")
        if record:
            yield record


def _parse_record(record: str) -> CommitProvenance:
    sha, short, date, name, email, parents, subject, trailers = record.split("\0", 7)
    parent_list = parents.split()
    return CommitProvenance(
        sha=sha,
        short_sha=short,
        authored_at=datetime.fromisoformat(date),
        author=name,
        subject=subject,
        parents=parent_list,
        provenance=Provenance.infer(
            _trailers(trailers),
            parents=len(parent_list),
            author_name=name,
            author_email=email,
            subject=subject,
        ),
    )


def _read_commits(repo: MemoryRepo, shas: list[str]) -> dict[str, CommitProvenance]:
    """Commits ``shas`` (full shas) by sha, from one ``git log --no-walk``."""
    if not shas:
        return {}
    output = git.run(repo.path, "log", "--no-walk=unsorted", f"--format={_FORMAT}", *shas)
    commits = (_parse_record(record) for record in _records(output.stdout))
    return {commit.sha: commit for commit in commits}


def _parse_porcelain(output: str) -> list[tuple[int, str, str]]:
    """(final line number, sha, text) of every line of ``git blame --porcelain``."""
    lines: list[tuple[int, str, str]] = []
    sha, line_no = "", 0
    for row in output.split("\n"):
        if row.startswith("\t"):
            lines.append((line_no, sha, row[1:]))
            continue
        parts = row.split(" ")
        if len(parts) in (3, 4) and _SHA.fullmatch(parts[0]):
            sha, line_no = parts[0], int(parts[2])
    return lines


def _behind_merge(repo: MemoryRepo, merge: CommitProvenance, path: str) -> str | None:
    """The newest commit ``merge`` brought in that touched ``path``: what a line the merge
    itself wrote (a resolved conflict) was resolved from. None if there is none."""
    newest = git.run(
        repo.path,
        "log",
        "-1",
        "--no-merges",
        "--format=%H",
        f"{merge.parents[0]}..{merge.sha}",
        "--",
        path,
    )
    sha = newest.stdout.strip()
    return sha or None
