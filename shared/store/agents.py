"""Agent records (``agents/<id>/agent.json``): create, read, list, update."""

from __future__ import annotations

import structlog

from shared.errors import CorruptStateFile, NameTaken, UnknownAgent
from shared.ids import ID_PATTERN
from shared.models.agents import AgentRecord
from shared.models.messages import utc_now
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
        if not self.layout.agents_dir.is_dir():
            return []
        records = []
        for child in sorted(self.layout.agents_dir.iterdir()):
            if not ID_PATTERN.fullmatch(child.name):
                continue
            try:
                record = read_model(child / "agent.json", AgentRecord)
            except CorruptStateFile as exc:
                log.error("agent_record_corrupt", path=exc.path, error=exc.message)
                continue
            if record is not None:
                records.append(record)
        return records

    def find(self, ref: str) -> AgentRecord:
        """An agent by id or by name."""
        if self.layout.agent_file(ref).exists():
            return self.get(ref)
        for record in self.list():
            if record.name == ref:
                return record
        raise UnknownAgent(f"no agent named or with id {ref!r}; see `agentctl agents list`")

    def ensure_name_free(self, name: str, *, except_id: str | None = None) -> None:
        for record in self.list():
            if record.name == name and record.id != except_id:
                raise NameTaken(f"an agent named {name!r} exists already ({record.id})")

    def save(self, record: AgentRecord) -> None:
        record.updated_at = utc_now()
        write_model_atomic(self.layout.agent_file(record.id), record)
