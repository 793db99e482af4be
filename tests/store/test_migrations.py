"""Versioned state files: every loader upgrades an older file through the one registry
and refuses a newer agentd's file with a typed error, leaving it as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.errors import CorruptStateFile, StateFileTooNew
from shared.models import migrations
from shared.models.agents import AgentRecord, CompactionEvent, ContextState, ConversationRecord
from shared.reflection.backoff import BackoffState
from shared.store.agents import AgentStore
from shared.store.atomic import read_model
from shared.store.conversations import Conversation
from shared.store.layout import Layout


def test_every_versioned_state_file_is_written_at_its_registry_version() -> None:
    models = [AgentRecord, ConversationRecord, ContextState, CompactionEvent, BackoffState]

    versions = {m.schema_kind: m.model_fields["schema_version"].default for m in models}

    assert versions == {kind: migrations.current_version(kind) for kind in versions}


def test_an_older_file_is_upgraded_by_each_later_step_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, Any]] = []

    def v1_to_v2_rename_title(data: dict[str, Any], path: Path) -> dict[str, Any]:
        seen.append(("v1_to_v2", data.get("schema_version")))
        return {**data, "name": data.pop("title")}

    def v2_to_v3_default_prompt(data: dict[str, Any], path: Path) -> dict[str, Any]:
        seen.append(("v2_to_v3", data["schema_version"]))
        return {"system_prompt": f"prompt of {data['name']}", **data}

    monkeypatch.setitem(
        migrations._STEPS, "agent", [v1_to_v2_rename_title, v2_to_v3_default_prompt]
    )
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"id": "agent-1", "title": "old"}))

    record = read_model(path, AgentRecord)

    assert record is not None
    assert (record.schema_version, record.name, record.system_prompt) == (3, "old", "prompt of old")
    assert seen == [("v1_to_v2", None), ("v2_to_v3", 2)]
    path.write_text(json.dumps({"schema_version": 2, "id": "agent-1", "name": "mid"}))
    seen.clear()

    assert read_model(path, AgentRecord) is not None
    assert seen == [("v2_to_v3", 2)]


def test_an_agent_record_from_a_newer_agentd_is_refused_and_listed_as_unreadable(
    tmp_path: Path,
) -> None:
    store = AgentStore(Layout(tmp_path))
    with store.creating("agent-new"):
        store.save(AgentRecord(id="agent-new", name="newer", system_prompt="p"))
    path = tmp_path / "agents" / "agent-new" / "agent.json"
    current = migrations.current_version("agent")
    newer = json.loads(path.read_text()) | {"schema_version": current + 1, "voice": "calm"}
    path.write_text(json.dumps(newer))
    before = path.read_bytes()

    with pytest.raises(StateFileTooNew) as refused:
        store.get("agent-new")

    assert refused.value.code == "state_file_too_new"
    assert (
        f"newer agentd (agent schema {current + 1}; this agentd reads up to {current})"
        in refused.value.message
    )
    assert "upgrade agentd" in refused.value.message
    assert [e.path for e in store.scan().corrupt] == [str(path)]
    assert path.read_bytes() == before


def test_a_context_window_from_a_newer_agentd_is_refused(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    chat = Conversation.create(layout, "agent-1", memory_head=None)
    path = chat.directory / "context.json"
    path.write_text(json.dumps({"schema_version": 5, "message_ids": []}))

    with pytest.raises(StateFileTooNew, match="context schema 5"):
        Conversation.open(layout, "agent-1", chat.id)

    assert json.loads(path.read_text())["schema_version"] == 5


@pytest.mark.parametrize("version", ["2", 0, True, 1.5])
def test_a_schema_version_that_is_not_a_version_is_corrupt(tmp_path: Path, version: Any) -> None:
    path = tmp_path / "compaction-event.json"
    path.write_text(
        json.dumps({"schema_version": version, "trigger": "t", "summary_message_id": "m"})
    )

    with pytest.raises(CorruptStateFile, match="is not a version number") as refused:
        read_model(path, CompactionEvent)

    assert not isinstance(refused.value, StateFileTooNew)


def test_an_agent_record_of_version_1_needs_no_approval_for_any_tool_and_is_saved_as_2(
    tmp_path: Path,
) -> None:
    store = AgentStore(Layout(tmp_path))
    with store.creating("agent-old"):
        store.save(AgentRecord(id="agent-old", name="old", system_prompt="p"))
    path = tmp_path / "agents" / "agent-old" / "agent.json"
    v1 = json.loads(path.read_text())
    del v1["requires_approval"]
    path.write_text(json.dumps(v1 | {"schema_version": 1}))

    record = store.get("agent-old")
    store.save(record)

    assert (record.schema_version, record.requires_approval) == (2, [])
    saved = json.loads(path.read_text())
    assert (saved["schema_version"], saved["requires_approval"]) == (2, [])


def test_an_agentd_before_approvals_refuses_a_record_that_names_tools_needing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as version 1 it would lose the list on its next save, and run bash unasked."""
    store = AgentStore(Layout(tmp_path))
    with store.creating("agent-gated"):
        store.save(
            AgentRecord(id="agent-gated", name="g", system_prompt="p", requires_approval=["bash"])
        )
    monkeypatch.setitem(migrations._STEPS, "agent", [])

    with pytest.raises(StateFileTooNew, match="agent schema 2; this agentd reads up to 1"):
        AgentStore(Layout(tmp_path)).get("agent-gated")
