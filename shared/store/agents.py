"""Agent records (``agents/<id>/agent.json``): create, read, list, update."""

from __future__ import annotations

import structlog

from shared.clock import utc_now
from shared.errors import CorruptStateFile, NameTaken, UnknownAgent
from shared.ids import ID_PATTERN
from shared.models.agents import AgentRecord
from shared.store.atomic import read_model, write_model_atomic
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


class AgentStore:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def get(self, agent_id: str) -> AgentRecord:
        record = read_model(self.layout.agent_file(agent_id), AgentRecord)
        if record is None:
            raise UnknownAgent(f"no agent {agent_id!r}; list agents with `agentctl agents list`")
        return record

    def list(self) -> list[AgentRecord]:
        """Every readable agent; corrupt records are logged and left out."""
        records, corrupt = self._scan()
        for error in corrupt:
            log.error("agent_record_corrupt", path=error.path, error=error.message)
        return records

    def _scan(self) -> tuple[list[AgentRecord], list[CorruptStateFile]]:
        records: list[AgentRecord] = []
        corrupt: list[CorruptStateFile] = []
        if not self.layout.agents_dir.is_dir():
            return records, corrupt
        for child in sorted(self.layout.agents_dir.iterdir()):
            if not ID_PATTERN.fullmatch(child.name):
                continue
            try:
                record = read_model(child / "agent.json", AgentRecord)
            except CorruptStateFile as exc:
                corrupt.append(exc)
                continue
            if record is not None:
                records.append(record)
        return records, corrupt

    def find(self, ref: str) -> AgentRecord:
        """An agent by id or by name.

        A name that matches no readable agent while some agent record is corrupt raises
        that corruption rather than "unknown": the missing agent may be the corrupt one,
        and answering "unknown" would let a caller create a second agent of that name.
        """
        if self.layout.agent_file(ref).exists():
            return self.get(ref)
        records, corrupt = self._scan()
        for record in records:
            if record.name == ref:
                return record
        if corrupt:
            raise corrupt[0]
        raise UnknownAgent(f"no agent named or with id {ref!r}; see `agentctl agents list`")

    def ensure_name_free(self, name: str, *, except_id: str | None = None) -> None:
        records, corrupt = self._scan()
        for record in records:
            if record.name == name and record.id != except_id:
                raise NameTaken(f"an agent named {name!r} exists already ({record.id})")
        if corrupt:
            raise corrupt[0]

    def save(self, record: AgentRecord) -> None:
        record.updated_at = utc_now()
        write_model_atomic(self.layout.agent_file(record.id), record)
