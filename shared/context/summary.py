"""What the summariser is asked and shown: a prompt, and the messages as one line each.

The transcript is plain ``[role] text`` lines (whitespace folded, tool results cut to
2,000 characters, an earlier summary shown as its raw text), trimmed in the middle if it
would not fit the summariser's own window.
"""

from __future__ import annotations

from shared.context.budget import compaction_threshold
from shared.ids import new_id
from shared.models.messages import AssistantMessage, Message, SummaryMessage, UserMessage
from shared.models.text import text_chars
from shared.providers.base import ModelRequest, Provider
from shared.providers.tokens import CHARS_PER_TOKEN, text_tokens

TOOL_RESULT_TRANSCRIPT_CHARS = 2_000

SUMMARY_PROMPT = """\
You compress the start of a conversation so it can leave the context window. The lines \
below are the oldest messages, one per line as [role] text; the newest messages stay in \
the window after your summary. Write a factual summary in the first person, under 300 \
words: the user's goals, what happened, decisions, exact identifiers (names, numbers, \
paths, URLs, ids), errors and fixes, and words worth searching for later. Only the summary."""


def transcript(messages: list[Message]) -> str:
    """One line per message, ``[role] text``; what the summariser reads."""
    return "\n".join(line for line in (_transcript_line(m) for m in messages) if line)


def _transcript_line(message: Message) -> str:
    if isinstance(message, SummaryMessage):
        text = message.payload.summary
        role = "summary"
    elif message.role == "tool":
        text = message.content
        if len(text) > TOOL_RESULT_TRANSCRIPT_CHARS:
            cut = len(text) - TOOL_RESULT_TRANSCRIPT_CHARS
            text = text[:TOOL_RESULT_TRANSCRIPT_CHARS] + f"... [truncated {cut} chars]"
        role = "tool"
    else:
        text = message.content
        if isinstance(message, AssistantMessage) and message.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
            text = f"{text} -> {calls}" if text else f"-> {calls}"
        role = message.role if message.kind == "message" else message.kind
    text = " ".join(text.split())
    return f"[{role}] {text}" if text else ""


def _fit_transcript(text: str, max_tokens: int) -> str:
    """Cut the middle out of a transcript too long for the summariser's own window."""
    max_chars = max_tokens * CHARS_PER_TOKEN
    if text_chars(text) <= max_chars:
        return text
    marker = "\n[... {} characters dropped to fit the summariser ...]\n"
    keep = max(0, (max_chars - len(marker) - 12) // 2)
    return text[:keep] + marker.format(len(text) - 2 * keep) + text[len(text) - keep :]


async def summarise(summariser: Provider, messages: list[Message]) -> str:
    """The summariser's summary of ``messages`` (its own window bounds the transcript)."""
    room = compaction_threshold(summariser.context_window) - text_tokens(SUMMARY_PROMPT)
    body = _fit_transcript(transcript(messages), max(64, room))
    request = ModelRequest(
        purpose="summary",
        system=SUMMARY_PROMPT,
        messages=[
            UserMessage(
                id=new_id("msg"),
                agent_id="summariser",
                conversation_id="summariser",
                role="user",
                content=body,
            )
        ],
    )
    response = await summariser.complete(request)
    return response.text.strip() or "(the summariser returned nothing)"
