"""Turning the context window into a request a provider accepts.

Providers refuse histories where a tool call has no result or a result has no call.
Both happen legitimately: a turn cancelled mid-tool, calls left waiting for approval,
a compaction that cut between a call and its result. The window on disk stays as it
happened; the request is shaped here, every time, and the shaping is never persisted.
"""

from __future__ import annotations

from shared.models.messages import AssistantMessage, Message, ToolResult

NOT_EXECUTED = "[not executed: the turn ended before this tool ran]"
TRUNCATION_MARKER = "... [truncated {count} chars]"


def tool_result_cap(context_window: int) -> int:
    """Longest tool result kept: 20% of the window at 4 chars a token, at least 5,000 chars."""
    return max(5000, int(context_window * 0.2 * 4))


def truncate_tool_output(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + TRUNCATION_MARKER.format(count=len(text) - cap)


def shape_messages(context: list[Message]) -> list[Message]:
    """The window with orphaned tool results dropped and unanswered calls answered."""
    shaped: list[Message] = []
    pending: dict[str, AssistantMessage] = {}
    for message in context:
        if not message.sent_to_model:
            continue
        if isinstance(message, ToolResult):
            if message.tool_call_id in pending:
                del pending[message.tool_call_id]
                shaped.append(message)
            continue
        if pending:
            shaped.extend(_answer_unanswered(pending))
            pending = {}
        if isinstance(message, AssistantMessage) and message.tool_calls:
            pending = {call.id: message for call in message.tool_calls}
        shaped.append(message)
    shaped.extend(_answer_unanswered(pending))
    return shaped


def _answer_unanswered(pending: dict[str, AssistantMessage]) -> list[Message]:
    answers: list[Message] = []
    for call_id, assistant in pending.items():
        call = next(c for c in assistant.tool_calls if c.id == call_id)
        answers.append(
            ToolResult(
                id=f"{assistant.id}-{call_id}-unanswered",
                agent_id=assistant.agent_id,
                conversation_id=assistant.conversation_id,
                role="tool",
                tool_call_id=call_id,
                name=call.name,
                is_error=True,
                content=NOT_EXECUTED,
                created_at=assistant.created_at,
            )
        )
    return answers
