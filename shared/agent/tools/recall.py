"""Recall tools: find what left the context window, then read around it.

The strategy taught to the model is letta's "needle, then expand": search with
distinctive words, take a hit's message id, and read the messages before and after it.
Both tools are echoes to recall itself (their calls and results score ×0.1), so earlier
searches never outrank the conversations they found.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.agent.tools.base import Tool, ToolContext
from shared.errors import AgentdError, ToolError
from shared.models.messages import Message
from shared.providers.base import ToolSchema
from shared.recall.ranking import Hit, SearchRequest

DEFAULT_HITS = 5
MAX_HITS = 20
AROUND_DEFAULT = 5
AROUND_MAX = 20
LINE_CHARS = 400


def hit_line(when: float | datetime, conversation_id: str, role: str, text: str) -> str:
    """``[<iso time> · <conversation> · <role>] <text>``, the text folded to one line."""
    moment = when if isinstance(when, datetime) else datetime.fromtimestamp(when, UTC)
    flat = " ".join(text.split())
    if len(flat) > LINE_CHARS:
        flat = flat[: LINE_CHARS - 1] + "…"
    stamp = moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"[{stamp} · {conversation_id} · {role}] {flat}"


def _recall(ctx: ToolContext) -> Any:
    if ctx.recall is None:
        raise ToolError("recall is not available in this context")
    return ctx.recall


def _int(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"{name} must be an integer")
    return max(low, min(high, value))


class RecallSearch(Tool):
    schema = ToolSchema(
        name="recall_search",
        description='Search all past messages by distinctive words ("quoted" = required).',
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "conversation": {"type": "string"},
            },
            "required": ["query"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        conversation = args.get("conversation")
        if conversation is not None and not isinstance(conversation, str):
            raise ToolError("conversation must be a conversation id")
        request = SearchRequest(
            query=query,
            limit=_int(args, "limit", DEFAULT_HITS, 1, MAX_HITS),
            conversation_id=conversation,
            current_conversation_id=ctx.conversation_id,
        )
        try:
            hits: list[Hit] = await _recall(ctx).search(request)
        except AgentdError as exc:
            raise ToolError(exc.message) from exc
        if not hits:
            return f"no past messages match {query!r}"
        return "\n".join(
            f"{hit_line(h.created_at, h.conversation_id, h.role, h.text)} (id {h.message_id})"
            for h in hits
        )


class MessagesAround(Tool):
    schema = ToolSchema(
        name="messages_around",
        description="Read the messages before and after a recall_search hit.",
        parameters={
            "type": "object",
            "properties": {
                "message_id": {"type": "string"},
                "before": {"type": "integer"},
                "after": {"type": "integer"},
            },
            "required": ["message_id"],
        },
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        message_id = args.get("message_id")
        if not isinstance(message_id, str):
            raise ToolError("message_id must be a message id from recall_search")
        before = _int(args, "before", AROUND_DEFAULT, 0, AROUND_MAX)
        after = _int(args, "after", AROUND_DEFAULT, 0, AROUND_MAX)
        try:
            messages: list[Message] = await _recall(ctx).around(message_id, before, after)
        except AgentdError as exc:
            raise ToolError(exc.message) from exc
        return "\n".join(
            hit_line(
                m.created_at,
                m.conversation_id,
                m.role if m.kind == "message" else m.kind,
                _display(m),
            )
            + (" ◀" if m.id == message_id else "")
            for m in messages
        )


def _display(message: Message) -> str:
    calls = " ".join(f"→ {c.name}({c.arguments})" for c in message.tool_calls)
    return f"{message.content} {calls}".strip()
