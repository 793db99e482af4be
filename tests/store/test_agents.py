"""Agent records: an agent whose record is gone is refused, never silently replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import AgentRecordMissing, CorruptStateFile, UnknownAgent
from shared.models.agents import AgentRecord
from shared.store import agents
from shared.store.agents import AgentStore
from shared.store.atomic import write_model_atomic
from shared.store.layout import Layout


def _store(home: Path) -> AgentStore:
    return AgentStore(Layout(home))


def _agent_with_a_conversation(store: AgentStore, agent_id: str, name: str) -> Path:
    with store.creating(agent_id) as directory:
        log = directory / "conversations" / "conv-1" / "messages.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text('{"id": "msg-1"}\n')
        store.save(AgentRecord(id=agent_id, name=name, system_prompt="p"))
    return directory


def test_a_record_deleted_from_a_directory_with_data_is_refused_by_id_and_by_any_name(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _agent_with_a_conversation(store, "agent-kept", "kept")
    directory = _agent_with_a_conversation(store, "agent-lost", "default")
    (directory / "agent.json").unlink()

    for ref in ("agent-lost", "default"):
        with pytest.raises(AgentRecordMissing) as refused:
            store.find(ref)
        assert refused.value.path == str(directory)
    with pytest.raises(AgentRecordMissing):
        store.ensure_name_free("new")
    assert store.find("kept").id == "agent-kept"
    assert [r.id for r in store.list()] == ["agent-kept"]
    rebuilt = AgentRecord.model_validate_json((directory / "agent.json.rebuilt").read_bytes())
    assert (rebuilt.id, rebuilt.default_conversation_id) == ("agent-lost", "conv-1")


def test_a_directory_being_created_or_holding_nothing_is_not_an_agent(tmp_path: Path) -> None:
    store = _store(tmp_path)
    (tmp_path / "agents" / "agent-empty" / "conversations").mkdir(parents=True)
    with store.creating("agent-new") as directory:
        log = directory / "conversations" / "conv-1" / "messages.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text('{"id": "msg-1"}\n')
        with pytest.raises(UnknownAgent):
            store.find("default")
        assert store.scan().missing == []


def test_a_creation_ending_between_the_record_read_and_the_mark_looked_for_is_no_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests race for the default agent: one creates it while the other scans. The
    scan read the record just before it was saved, and looked for the creation's mark just
    after it was removed: that is an agent just made, not one that lost its record, and
    nothing is rebuilt."""
    store = _store(tmp_path)
    directory = _agent_with_a_conversation(store, "agent-new", "default")
    read_first = {directory / "agent.json"}
    read = agents.read_model

    def read_before_the_save(path: Path, model: type[AgentRecord]) -> AgentRecord | None:
        if path in read_first:
            read_first.discard(path)
            return None
        return read(path, model)

    monkeypatch.setattr(agents, "read_model", read_before_the_save)

    assert store.scan().missing == []
    assert not (directory / "agent.json.rebuilt").exists()
    assert store.find("default").id == "agent-new"


def test_a_creation_that_fails_leaves_no_directory(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(RuntimeError), store.creating("agent-new") as directory:
        (directory / "memory").mkdir()
        raise RuntimeError("git init failed")
    assert not (tmp_path / "agents" / "agent-new").exists()


def test_a_record_changed_on_disk_behind_the_store_is_read_again(tmp_path: Path) -> None:
    """The store keeps what it read, but a record replaced by another writer (by hand,
    an import) is what the next ``get`` answers, even at the same size within one tick."""
    store = _store(tmp_path)
    _agent_with_a_conversation(store, "agent-1", "alpha")
    assert store.get("agent-1").name == "alpha"

    for name in ("bravo", "delta"):  # same length, back to back
        write_model_atomic(tmp_path / "agents" / "agent-1" / "agent.json", store.get("agent-1"))
        record = store.get("agent-1")
        record.name = name
        write_model_atomic(tmp_path / "agents" / "agent-1" / "agent.json", record)
        assert store.get("agent-1").name == name


def test_a_record_returned_is_the_callers_to_change_and_does_not_change_the_store(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _agent_with_a_conversation(store, "agent-1", "alpha")
    store.get("agent-1").name = "changed in memory only"
    assert store.get("agent-1").name == "alpha"


def test_a_record_damaged_after_it_was_read_is_refused_not_served_from_memory(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _agent_with_a_conversation(store, "agent-1", "alpha")
    assert store.get("agent-1").name == "alpha"
    (tmp_path / "agents" / "agent-1" / "agent.json").write_text('{"id": "agent-')

    with pytest.raises(CorruptStateFile):
        store.get("agent-1")
