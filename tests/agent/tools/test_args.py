"""Tool arguments: every tool's schema is generated from its ``Args`` model, and whatever
the model sends that ``Args`` refuses is a ``ToolError`` naming the field, before the tool
does anything."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from agentd.jobs.checkout import Worktree
from agentd.jobs.integration import IntegrationBash
from agentd.jobs.integration_tools import DeclineProposal, MergeProposal, Proposal
from reflector.tools import reflection_tools
from shared.agent.tools.args import ToolArgs, parameters_schema
from shared.agent.tools.base import Tool, ToolContext
from shared.agent.tools.files import ReadFile
from shared.agent.tools.registry import main_agent_tools
from shared.errors import ToolError
from shared.reflection.payload import PayloadFile
from tests.agent.tools.conftest import RecordingMemoryEdit

PAYLOAD = PayloadFile(path=Path("/payload.json"), slices=[], is_manifest=False)
PROPOSAL = Proposal(
    Worktree(
        job_id="job",
        path=Path("/clone"),
        branch="reflection/job",
        base_head="",
        author_email="a@b",
        parent_dir=Path("/m"),
    )
)
EVERY_TOOL: list[Tool] = [
    *main_agent_tools(),
    *reflection_tools(PAYLOAD),
    IntegrationBash(),
    MergeProposal(PROPOSAL),
    DeclineProposal(PROPOSAL),
]
"""Every tool a model is offered: the main agent's, the reflection sub-agent's, and those
the main agent reviews a reflection's proposal with."""

GOOD = {"string": "x", "integer": 1, "number": 1.5, "boolean": True}
WRONG = {"string": 7, "integer": "1", "number": "1", "boolean": "true"}
"""A value of the wrong JSON type for each type: strictness refuses even ``"1"``."""


def _name(tool: Tool) -> str:
    return type(tool).__name__


def _run(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> str:
    return asyncio.run(tool.run(args, ctx))


@pytest.mark.parametrize("tool", EVERY_TOOL, ids=_name)
def test_the_schema_is_generated_from_the_args_model(tool: Tool) -> None:
    params = tool.schema.parameters
    assert params == parameters_schema(tool.Args)
    fields = tool.Args.model_fields
    assert list(params["properties"]) == list(fields)
    assert params["required"] == [name for name, field in fields.items() if field.is_required()]
    assert params["additionalProperties"] is False


@pytest.mark.parametrize("tool", EVERY_TOOL, ids=_name)
def test_a_malformed_argument_is_a_tool_error_naming_the_field(
    tool: Tool, ctx: ToolContext, recorder: RecordingMemoryEdit
) -> None:
    properties = tool.schema.parameters["properties"]
    required = tool.schema.parameters["required"]
    good = {name: GOOD[properties[name]["type"]] for name in required}
    cases = [({**good, name: WRONG[p["type"]]}, name) for name, p in properties.items()]
    cases += [({k: v for k, v in good.items() if k != name}, name) for name in required]
    cases.append(({**good, "colour": "red"}, "colour"))

    for args, field in cases:
        with pytest.raises(ToolError, match=rf"^invalid arguments for {tool.name}: {field} "):
            _run(tool, args, ctx)
    assert recorder.calls == [], "a tool began its work with arguments it should refuse"


def test_the_error_says_what_is_wrong_with_each_field_and_what_the_tool_takes(
    ctx: ToolContext,
) -> None:
    with pytest.raises(ToolError) as err:
        _run(ReadFile(), {"path": 5, "offset": "2", "limit": 0, "colour": "red"}, ctx)
    assert str(err.value) == (
        "invalid arguments for read_file: path should be a valid string (got 5); "
        'offset should be a valid integer (got "2"); '
        "limit should be greater than or equal to 1 (got 0); colour is not a parameter. "
        "read_file takes path (required), offset, limit"
    )


@pytest.mark.parametrize("value", [True, 1.0, 0, -3])
def test_an_integer_must_be_a_whole_positive_number_not_a_bool_or_float(
    ctx: ToolContext, value: object
) -> None:
    (ctx.workspace / "a.txt").write_text("one\n")
    with pytest.raises(ToolError, match=r"^invalid arguments for read_file: offset "):
        _run(ReadFile(), {"path": "a.txt", "offset": value}, ctx)


def test_null_means_not_given(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("one\ntwo\n")
    assert _run(ReadFile(), {"path": "a.txt", "offset": None, "limit": None}, ctx) == (
        "     1\tone\n     2\ttwo"
    )
    with pytest.raises(ToolError, match="path is required"):
        _run(ReadFile(), {"path": None}, ctx)


def test_the_schema_keeps_names_types_descriptions_and_required_only() -> None:
    class Args(ToolArgs):
        query: str = Field(description="distinctive words")
        limit: int = Field(5, ge=1, le=20)
        conversation: str | None = None

    assert parameters_schema(Args) == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "distinctive words"},
            "limit": {"type": "integer"},
            "conversation": {"type": "string"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_args_the_schema_cannot_express_are_refused_when_the_tool_is_defined() -> None:
    refused = r"Either\.Args: the tool schema cannot express \['anyOf'\]"
    with pytest.raises(TypeError, match=refused):

        class Either(Tool):
            name = "either"
            description = "Takes a number or a word."

            class Args(ToolArgs):
                value: int | str

            async def execute(self, args: Args, ctx: ToolContext) -> str:
                return "unreachable"
