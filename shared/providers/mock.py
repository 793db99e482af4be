"""The deterministic mock model: offline, rule-based, and a provider at the edges.

It answers from what it is shown, like a model would: facts about the user come from
``system/human.md`` as compiled into the system prompt, not from the disk. It reports
usage (chars/4 estimates) and refuses a request over its window with
``ContextOverflowError``, so budgeting and compaction are exercised for real.

Rules, on the newest user message:
- "你知道我什么？" / "what do you know about me?" → the bullet lines of ``system/human.md``;
- anything else → ``（mock）我听到了：<text>``.

Asked to summarise (the compaction summariser's prompt), it keeps the first
:data:`SUMMARY_CHARS` characters of each transcript line's text, as the seed's mock does:
deterministic, and lossy enough that recall is needed to get details back.
"""

from __future__ import annotations

import re

from shared.context.estimate import request_tokens, text_tokens
from shared.context.summary import SUMMARY_PROMPT
from shared.errors import ContextOverflowError
from shared.memory.compile import human_facts
from shared.models.messages import Message, Usage
from shared.providers.base import ModelRequest, ModelResponse, Provider

MOCK_MODEL = "mock"
SUMMARY_CHARS = 12
DEFAULT_MOCK_CONTEXT_WINDOW = 128_000

_TRANSCRIPT_LINE = re.compile(r"^\[(?P<role>[a-z_]+)\] (?P<text>.*)$")
_TRAILING_PUNCTUATION = re.compile(r"[\s?？!！。.,，~]+$")
_ASK_ABOUT_ME_ZH = {"你知道我什么", "你都知道我什么", "你记得我什么"}
_ASK_ABOUT_ME_EN = {"what do you know about me", "what do you remember about me"}


class MockProvider(Provider):
    def __init__(self, *, context_window: int = DEFAULT_MOCK_CONTEXT_WINDOW) -> None:
        self.model = MOCK_MODEL
        self.context_window = context_window

    async def complete(self, request: ModelRequest) -> ModelResponse:
        prompt_tokens = request_tokens(request)
        if prompt_tokens > self.context_window:
            raise ContextOverflowError(
                f"mock: the request is ~{prompt_tokens} tokens but the context window is "
                f"{self.context_window}; compact the conversation or raise AGENTD_CONTEXT_WINDOW"
            )
        text = self._answer(request)
        return ModelResponse(
            text=text,
            usage=Usage(input_tokens=prompt_tokens, output_tokens=text_tokens(text)),
            finish_reason="stop",
            model=self.model,
        )

    def _answer(self, request: ModelRequest) -> str:
        if request.system == SUMMARY_PROMPT:
            return _summarise(request.messages[-1].content)
        user_text = _latest_user_speech(request.messages)
        question = _TRAILING_PUNCTUATION.sub("", user_text).casefold()
        if question in _ASK_ABOUT_ME_ZH:
            facts = human_facts(request.system)
            return "我记得关于你的这些：\n" + _bullets(facts) if facts else "我还不了解你。"
        if question in _ASK_ABOUT_ME_EN:
            facts = human_facts(request.system)
            if not facts:
                return "I don't know anything about you yet."
            return "This is what I remember about you:\n" + _bullets(facts)
        return f"（mock）我听到了：{user_text}"


def _summarise(transcript: str) -> str:
    lines = []
    for line in transcript.splitlines():
        match = _TRANSCRIPT_LINE.match(line)
        if match:
            lines.append(f"[{match['role']}] {match['text'][:SUMMARY_CHARS]}")
    return "\n".join(lines)


def _latest_user_speech(messages: list[Message]) -> str:
    for message in reversed(messages):
        if message.role == "user" and message.kind == "message":
            return message.content
    return ""


def _bullets(facts: list[str]) -> str:
    return "\n".join(f"- {fact}" for fact in facts)
