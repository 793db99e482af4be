"""Reflections held for the user: where a proposal's commits and its record are kept.

A reflection whose commits are destructive (:mod:`shared.memory.destructive`) is not
merged. Its commits stay in the memory repo under ``refs/proposals/<id>`` (outside
``refs/heads/``, so the job's cleanup and the orphan sweep, which delete
``reflection/*`` branches, never drop them, and ``main`` never sees them), and a record
``reflections/proposals/<id>.json`` says what it is: the reflection it came from, the
memory it started from (``base``) and its last commit (``head``), why it was held, and
its state. The id is the reflection's id.

A proposal is answered once (:mod:`shared.memory.proposal_answers`): accepted (merged) or
rejected (dropped). Its record stays, with the answer and when, so a second answer is
refused as :class:`ProposalAnswered` rather than mistaken for an unknown id; its ref goes,
since nothing is left to review. Every change to a record or a ref happens under the memory
lock, which is what makes two answers at once serialise into one answer and one refusal.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from shared.errors import CorruptStateFile, ProposalAnswered, UnknownProposal
from shared.ids import validate_id
from shared.memory import git
from shared.memory.destructive import Destruction
from shared.memory.repo import MemoryRepo
from shared.store.atomic import read_model, write_model_atomic

log = structlog.get_logger(__name__)

REF_PREFIX = "refs/proposals/"
MAX_DIFF_CHARS = 500_000

ProposalState = Literal["held", "accepted", "rejected"]


class Proposal(BaseModel):
    """One held reflection and, once answered, the answer."""

    model_config = ConfigDict(frozen=True)

    id: str
    """The reflection's id (``agentctl reflections`` shows it)."""
    agent_id: str
    request_id: str
    conversation_ids: list[str] = Field(default_factory=list)
    created_at: datetime
    base: str
    """The memory commit the reflection started from."""
    head: str
    """The reflection's last commit (as it landed: the harness's provenance on it)."""
    destruction: Destruction
    state: ProposalState = "held"
    answered_at: datetime | None = None
    merge_commit: str | None = None
    """For an accepted proposal: the merge commit that brought it into memory (None when
    its commits were found in memory already)."""

    @property
    def ref(self) -> str:
        return REF_PREFIX + self.id

    def answered(
        self, state: ProposalState, at: datetime, merge_commit: str | None = None
    ) -> Proposal:
        return self.model_copy(
            update={"state": state, "answered_at": at, "merge_commit": merge_commit}
        )


class Proposals:
    """One agent's proposals: records in ``directory``, commits in ``repo``.

    Blocking (git, files). The writers (:meth:`hold`, :meth:`save`, :meth:`drop_ref`)
    expect the caller to hold the memory lock."""

    def __init__(self, repo: MemoryRepo, directory: Path) -> None:
        self.repo = repo
        self.directory = directory

    def hold(self, proposal: Proposal) -> None:
        """Keep ``proposal``'s commits and record. A record of the same id that is still
        held is replaced (a redelivered job proposes again); an answered one is not."""
        existing = self._load(proposal.id)
        if existing is not None and existing.state != "held":
            raise ProposalAnswered(
                f"proposal {proposal.id} was {existing.state} already; it is not proposed again"
            )
        git.run(self.repo.path, "update-ref", proposal.ref, proposal.head)
        self.save(proposal)

    def save(self, proposal: Proposal) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_model_atomic(self._path(proposal.id), proposal)

    def drop_ref(self, proposal: Proposal) -> None:
        """Delete the proposal's ref (gone already is fine): its commits are merged or
        dropped, and git may collect them."""
        git.run(self.repo.path, "update-ref", "-d", proposal.ref)

    def get(self, proposal_id: str) -> Proposal:
        """The proposal ``proposal_id`` names, in any state."""
        found = self._load(validate_id(proposal_id, "proposal id"))
        if found is None:
            raise UnknownProposal(
                f"no proposal {proposal_id!r} for this agent; list the held ones with "
                "`agentctl memory proposals`"
            )
        return found

    def get_held(self, proposal_id: str) -> Proposal:
        """The proposal, refused if it was answered already."""
        proposal = self.get(proposal_id)
        if proposal.state != "held":
            assert proposal.answered_at is not None
            raise ProposalAnswered(
                f"proposal {proposal.id} was {proposal.state} at "
                f"{proposal.answered_at.isoformat()}; a proposal is answered once"
            )
        return proposal

    def held(self) -> list[Proposal]:
        """The proposals waiting for an answer, oldest first."""
        return held_proposals(self.directory)

    def diff(self, proposal: Proposal) -> tuple[str, bool]:
        """The patch from the proposal's base to its head, and whether it was cut short."""
        patch = git.run(
            self.repo.path,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            proposal.base,
            proposal.head,
        ).stdout
        return patch[:MAX_DIFF_CHARS], len(patch) > MAX_DIFF_CHARS

    def _path(self, proposal_id: str) -> Path:
        return self.directory / f"{validate_id(proposal_id, 'proposal id')}.json"

    def _load(self, proposal_id: str) -> Proposal | None:
        return _read(self._path(proposal_id))


def held_proposals(directory: Path) -> list[Proposal]:
    """The proposals in ``directory`` waiting for an answer, oldest first; records only,
    no git (``status`` reads them for every agent)."""
    paths = sorted(directory.glob("*.json")) if directory.is_dir() else []
    found = [proposal for path in paths if (proposal := _read(path)) is not None]
    return sorted((p for p in found if p.state == "held"), key=lambda p: p.created_at)


def _read(path: Path) -> Proposal | None:
    """The record at ``path``; a damaged one is logged and left alone (its commits stay
    under ``refs/proposals/``, where git can still show them)."""
    try:
        return read_model(path, Proposal)
    except CorruptStateFile as exc:
        log.warning("proposal_record_unreadable", path=str(path), error=exc.message)
        return None
