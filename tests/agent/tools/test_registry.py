"""The main agent's toolset, with schemas small enough to send on every request."""

from __future__ import annotations

import json

from shared.agent.tools.registry import main_agent_tools


def test_the_main_agent_has_files_bash_and_recall() -> None:
    assert [tool.name for tool in main_agent_tools()] == [
        "read_file",
        "write_file",
        "edit_file",
        "bash",
        "recall_search",
        "messages_around",
    ]


def test_every_schema_is_small_and_requires_only_declared_properties() -> None:
    for schema in (tool.schema for tool in main_agent_tools()):
        assert len(json.dumps(schema.model_dump(), separators=(",", ":"))) < 350, schema.name
        params = schema.parameters
        assert set(params["required"]) <= set(params["properties"]), schema.name
