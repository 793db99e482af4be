"""The deterministic mock model: offline, rule-based, and a provider at the edges.

It answers from what it is shown, like a model would: facts about the user come from
``system/human.md`` as compiled into the system prompt, not from the disk. It reports
usage (chars/4 estimates) and refuses a request over its window with
``ContextOverflowError``, so budgeting and compaction are exercised for real.

Rules, on the newest user message:
- "你知道我什么？" / "what do you know about me?" → the bullet lines of ``system/human.md``;
- "还记得X吗？" / "do you remember X?" → a ``recall_search({"query": X})`` call (when the
  tool is offered), then, on its result, ``我在过去的对话里找到了：<top hit>`` /
  ``I found this in our past conversations: <top hit>`` (or that nothing was found);
- "run `CMD`" / "运行 `CMD`" → a ``bash({"command": CMD})`` call (when the tool is
  offered), then, on its result, ``The command printed: <output>``, or, when the result
  is an error (the call failed, or the user denied it), ``The command did not run:
  <result>``;
- anything else → ``（mock）我听到了：<text>``.

When the turn listens for text as it is written (:mod:`.streaming`), the answer is handed
on in :data:`STREAM_PIECES` pieces first, as a real model streams it.

Asked for a summary (a request whose ``purpose`` is ``summary``), it keeps the first
:data:`SUMMARY_CHARS` characters of each transcript line's text, as the seed's mock does:
deterministic, and lossy enough that recall is needed to get details back. In an
integration turn (``purpose`` ``integration``) it accepts the proposal with the
``merge_proposal`` tool it is offered and reports how it went. The purpose and the tool
are all it takes from the harness: it knows none of the harness's prompts.
"""

from __future__ import annotations

import json
import re

from shared.errors import ContextOverflowError
from shared.ids import new_id
from shared.memory.compile import human_facts
from shared.models.messages import Message, ToolCall, ToolResult, Usage
from shared.providers.base import FinishReason, ModelRequest, ModelResponse, Provider
from shared.providers.streaming import pieces, text_listener
from shared.providers.tokens import request_tokens, text_tokens

MOCK_MODEL = "mock"
SUMMARY_CHARS = 12
STREAM_PIECES = 3
"""How many pieces a streamed mock answer comes in."""
DEFAULT_MOCK_CONTEXT_WINDOW = 128_000

_TRANSCRIPT_LINE = re.compile(r"^\[(?P<role>[a-z_]+)\] (?P<text>.*)$")
_TRAILING_PUNCTUATION = re.compile(r"[\s?？!！。.,，~]+$")
_ASK_ABOUT_ME_ZH = {"你知道我什么", "你都知道我什么", "你记得我什么"}
_ASK_ABOUT_ME_EN = {"what do you know about me", "what do you remember about me"}
_REMEMBER_ZH = re.compile(r"^还记得(?P<topic>.+?)吗[？?]?$")
_REMEMBER_EN = re.compile(r"^do you remember (?P<topic>.+?)\??$", re.IGNORECASE)
_HIT_LINE = re.compile(r"^\[[^\]]*\] (?P<text>.*?)(?: \(id [^)]*\))?$")
_RUN = re.compile(r"^(?:run|运行)\s*`(?P<command>[^`]+)`[\s.。]*$", re.IGNORECASE)
RECALL_TOOL = "recall_search"
BASH_TOOL = "bash"
MERGE_TOOL = "merge_proposal"


def admit(request: ModelRequest, context_window: int, who: str) -> int:
    """Count the request as the mocks do (chars/4) and refuse it over the window, like a
    real provider would; returns the count for the usage report."""
    prompt_tokens = request_tokens(request)
    if prompt_tokens > context_window:
        raise ContextOverflowError(
            f"{who}: the request is ~{prompt_tokens} tokens but the context window is "
            f"{context_window}; compact the conversation or raise AGENTD_CONTEXT_WINDOW"
        )
    return prompt_tokens


def respond(prompt_tokens: int, action: str | list[ToolCall]) -> ModelResponse:
    """A mock's reply (an answer or tool calls) with usage, as a provider reports it."""
    finish: FinishReason
    if isinstance(action, str):
        output, calls, finish = action, [], "stop"
    else:
        output, calls, finish = "".join(c.arguments for c in action), action, "tool_calls"
    return ModelResponse(
        text=action if isinstance(action, str) else "",
        tool_calls=calls,
        usage=Usage(input_tokens=prompt_tokens, output_tokens=text_tokens(output)),
        finish_reason=finish,
        model=MOCK_MODEL,
    )


class MockProvider(Provider):
    def __init__(self, *, context_window: int = DEFAULT_MOCK_CONTEXT_WINDOW) -> None:
        self.model = MOCK_MODEL
        self.context_window = context_window

    async def complete(self, request: ModelRequest) -> ModelResponse:
        prompt_tokens = admit(request, self.context_window, "mock")
        call = _integration_call(request) or _recall_call(request) or _bash_call(request)
        response = respond(prompt_tokens, [call] if call is not None else self._answer(request))
        await stream_text(response.text)
        return response

    def _answer(self, request: ModelRequest) -> str:
        if request.purpose == "summary":
            return _summarise(request.messages[-1].content)
        if request.purpose == "integration" and request.messages:
            return _report_integration(request.messages[-1])
        user_text = _latest_user_speech(request.messages)
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResult) and last.name == RECALL_TOOL:
            return _report_recall(last.content, user_text)
        if isinstance(last, ToolResult) and last.name == BASH_TOOL:
            said = " ".join(last.content.split())
            if last.is_error:
                return f"The command did not run: {said}"
            return f"The command printed: {said}" if said else "The command printed nothing."
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


async def stream_text(text: str) -> None:
    """Hand ``text`` on in a few pieces if the call streams (:mod:`.streaming`)."""
    listener = text_listener()
    if listener is not None:
        for piece in pieces(text, STREAM_PIECES):
            await listener(piece)


def _recall_call(request: ModelRequest) -> ToolCall | None:
    """A recall_search call for "还记得X吗？" / "do you remember X?", if recall is offered."""
    if not request.messages or request.messages[-1].role != "user":
        return None
    if RECALL_TOOL not in {tool.name for tool in request.tools}:
        return None
    text = _latest_user_speech(request.messages).strip()
    match = _REMEMBER_ZH.match(text) or _REMEMBER_EN.match(text)
    if match is None:
        return None
    arguments = json.dumps({"query": match["topic"].strip()}, ensure_ascii=False)
    return ToolCall(id=new_id("call"), name=RECALL_TOOL, arguments=arguments)


def _bash_call(request: ModelRequest) -> ToolCall | None:
    """A bash call for "run `CMD`" / "运行 `CMD`", if bash is offered."""
    if not request.messages or request.messages[-1].role != "user":
        return None
    if BASH_TOOL not in {tool.name for tool in request.tools}:
        return None
    match = _RUN.match(_latest_user_speech(request.messages).strip())
    if match is None:
        return None
    arguments = json.dumps({"command": match["command"].strip()}, ensure_ascii=False)
    return ToolCall(id=new_id("call"), name=BASH_TOOL, arguments=arguments)


def _integration_call(request: ModelRequest) -> ToolCall | None:
    """Explicit merge: accept the proposal with the tool offered for it, then report."""
    last = request.messages[-1] if request.messages else None
    if request.purpose != "integration" or last is None or last.role != "user":
        return None
    if MERGE_TOOL not in {tool.name for tool in request.tools}:
        return None
    arguments = json.dumps({"summary": "accept the reflection's proposal"})
    return ToolCall(id=new_id("call"), name=MERGE_TOOL, arguments=arguments)


def _report_integration(result: Message) -> str:
    if not isinstance(result, ToolResult):
        return f"（mock）I was offered no {MERGE_TOOL} tool, so I merged nothing."
    if result.is_error:
        return f"（mock）The merge failed: {result.content.strip()[:300]}"
    return "（mock）Reviewed the reflection's proposal and merged it into my memory."


def _report_recall(result: str, question: str) -> str:
    """Answer with the best hit that is neither the question itself nor a search call (both
    are demoted, but when nothing else matches they are still the only hits)."""
    chinese = _REMEMBER_ZH.match(question.strip()) is not None
    hits = (_HIT_LINE.match(line) for line in result.splitlines())
    first = next((h for h in hits if h is not None and _informative(h["text"], question)), None)
    if first is None:
        return (
            "我在过去的对话里没有找到相关的内容。"
            if chinese
            else ("I found nothing about that in our past conversations.")
        )
    if chinese:
        return f"我在过去的对话里找到了：{first['text']}"
    return f"I found this in our past conversations: {first['text']}"


def _informative(text: str, question: str) -> bool:
    return text != question.strip() and not text.startswith(f"{RECALL_TOOL} ")


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
