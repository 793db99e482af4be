"""The token estimate: four UTF-16 code units a token, over what the provider is sent.

Lengths are kept on messages and schemas (every step of every turn measures the whole
window); these pin that the kept figures are the ones the rule gives for the text itself.
"""

from __future__ import annotations

import json
import math

from shared.agent.tools.registry import main_agent_tools
from shared.models.messages import Message, ToolCall
from shared.providers.base import ModelRequest, ToolSchema
from shared.providers.tokens import message_tokens, request_tokens, tools_tokens


def _estimate(text: str) -> int:
    return math.ceil(len(text.encode("utf-16-le")) // 2 / 4)


def test_tool_schemas_count_as_the_compact_json_array_the_provider_is_sent() -> None:
    schemas = [tool.schema for tool in main_agent_tools()]
    extra = ToolSchema(name="查找", description="找 🔍 something", parameters={"type": "object"})
    for tools in (schemas, schemas[:1], [*schemas, extra], [extra]):
        sent = json.dumps([t.to_openai() for t in tools], separators=(",", ":"), ensure_ascii=False)
        assert tools_tokens(tools) == _estimate(sent)
    assert tools_tokens([]) == 0


def test_a_message_counts_its_text_and_every_call_in_utf16_units() -> None:
    calls = [ToolCall(id="c1", name="recall", arguments='{"query": "数据库 🔍"}')]
    reply = Message.of(
        id="msg-1",
        agent_id="a",
        conversation_id="c",
        role="assistant",
        content="好的 👍 ok",
        tool_calls=calls,
    )
    assert message_tokens(reply) == _estimate("好的 👍 ok" + "recall" + '{"query": "数据库 🔍"}')
    asked = Message.of(id="msg-2", agent_id="a", conversation_id="c", role="user", content="x" * 9)
    assert message_tokens(asked) == 3


def test_a_request_counts_its_system_prompt_tools_and_messages() -> None:
    asked = Message.of(id="m", agent_id="a", conversation_id="c", role="user", content="hi there")
    tools = [tool.schema for tool in main_agent_tools()]
    request = ModelRequest(system="你是助手", messages=[asked, asked], tools=tools)
    assert request_tokens(request) == 1 + tools_tokens(tools) + 2 * 2
