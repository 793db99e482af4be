"""Recall tools: find what left the context window, then read around it.

The strategy taught to the model is letta's "needle, then expand": search with
distinctive words, take a hit's message id, and read the messages before and after it.
Both tools are echoes to recall itself (their calls and results score ×0.1), so earlier
searches never outrank the conversations they found. A search answered while the index
is still catching up on the logs (after a restart) says so above its hits: the model must
not take a partial answer for a whole one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from shared.agent.tools.args import NonBlankStr, NonEmptyStr, ToolArgs, clamped
from shared.agent.tools.base import Tool, ToolContext
from shared.errors import AgentdError, ToolError
from shared.models.messages import AssistantMessage, Message
from shared.recall.ranking import Found, SearchRequest

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


class RecallSearch(Tool):
    name = "recall_search"
    description = 'Search all past messages by distinctive words ("quoted" = required).'

    class Args(ToolArgs):
        query: NonBlankStr
        limit: Annotated[int, clamped(1, MAX_HITS)] = DEFAULT_HITS
        conversation: str | None = None

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        query = args.query
        request = SearchRequest(
            query=query,
            limit=args.limit,
            conversation_id=args.conversation,
            current_conversation_id=ctx.conversation_id,
        )
        try:
            found: Found = await _recall(ctx).search(request)
        except AgentdError as exc:
            raise ToolError(exc.message) from exc
        note = [f"({found.incomplete})"] if found.incomplete else []
        if not found.hits:
            return " ".join([f"no past messages match {query!r}", *note])
        return "\n".join(
            note
            + [
                f"{hit_line(h.created_at, h.conversation_id, h.role, h.text)} (id {h.message_id})"
                for h in found.hits
            ]
        )


class MessagesAround(Tool):
    name = "messages_around"
    description = "Read the messages before and after a recall_search hit."

    class Args(ToolArgs):
        message_id: NonEmptyStr
        before: Annotated[int, clamped(0, AROUND_MAX)] = AROUND_DEFAULT
        after: Annotated[int, clamped(0, AROUND_MAX)] = AROUND_DEFAULT

    async def execute(self, args: Args, ctx: ToolContext) -> str:
        message_id, before, after = args.message_id, args.before, args.after
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
    tool_calls = message.tool_calls if isinstance(message, AssistantMessage) else []
    calls = " ".join(f"→ {c.name}({c.arguments})" for c in tool_calls)
    return f"{message.content} {calls}".strip()
