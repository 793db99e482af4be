"""A turn's events made into a chat completion: streamed as server-sent events with
``stream: true``, else gathered into one body.

What the client gets is what the agent said in the turn: the text of each of its replies,
a blank line between two (a reply before a tool call, then the answer after it), sent
on piece by piece as the model writes it. Tool calls and their results are the agent's
own and are not sent. A turn that stops on a tool call waiting for the user's approval
ends its text with a line saying what waits and how to answer it (``[agentd] … waits for
your approval: agentctl approve ID …``), with ``finish_reason`` ``stop``; the
conversation takes no new message until it is answered (HTTP 409 ``approval_pending``).
Every completion also carries an ``agentd`` object (agent, conversation, turn, stop
reason, the calls that wait) for clients that look.

A stream starts with the first piece of text, so a turn that fails before saying
anything is answered with a plain HTTP error; one that fails later ends its stream with
an ``error`` event, as OpenAI's does, which the SDKs raise. ``usage`` is the whole turn's:
in its own last chunk when ``stream_options.include_usage`` asks for it, else on the
chunk with the ``finish_reason``.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from aiohttp import web

from agentd.web.openai_errors import answer, stream_error, turn_error_status
from agentd.web.openai_wire import Completion, CompletionRequest, extra, finish_reason, usage
from shared.message_refs import short_id
from shared.models.events import Assistant, AssistantDelta, Event
from shared.models.turns import TurnResult

log = structlog.get_logger(__name__)

BETWEEN_REPLIES = "\n\n"


class CompletionReply:
    def __init__(
        self,
        request: web.Request,
        body: CompletionRequest,
        completion: Completion,
        headers: dict[str, str],
    ) -> None:
        self.request = request
        self.body = body
        self.completion = completion
        self.headers = headers
        self.said: list[str] = []
        """Each finished reply's text, in order."""
        self.streamed = ""
        """What of the reply being written was sent on."""
        self.response: web.StreamResponse | None = None
        """The stream, once begun."""
        self.gone = False

    async def emit(self, event: Event) -> None:
        """The turn's ``emit``: only the reply's text matters here."""
        if isinstance(event, AssistantDelta):
            await self._say(event.text)
        elif isinstance(event, Assistant):
            text = event.text
            if text.startswith(self.streamed) and len(text) > len(self.streamed):
                await self._say(text[len(self.streamed) :])  # a provider that did not stream
            self.said.append(text)
            self.streamed = ""

    async def _say(self, piece: str) -> None:
        if not self.streamed and self.said:
            piece = BETWEEN_REPLIES + piece
        self.streamed += piece
        if self.body.stream:
            await self._send(self.completion.chunk({"content": piece}))

    @property
    def text(self) -> str:
        return BETWEEN_REPLIES.join(self.said)

    async def finish(self, result: TurnResult) -> web.StreamResponse:
        """The end of the completion, as the turn ended."""
        if result.stop_reason == "error":
            return await self.failed(result.error or {"code": "error", "message": "failed"})
        if result.approvals:
            note = waiting_note(result.approvals)
            await self._say(note)
            self.said.append(note)
            self.streamed = ""
        if not self.body.stream:
            whole = self.completion.whole(self.text, result)
            return web.json_response(whole, headers=self.headers)
        finish = finish_reason(result)
        last: dict[str, Any] = {"agentd": extra(result)}
        if not self.body.usage_chunk:
            last["usage"] = usage(result.usage)
        await self._send(self.completion.chunk({}, finish, **last))
        if self.body.usage_chunk:
            await self._send(self.completion.usage_chunk(result))
        await self._write(b"data: [DONE]\n\n")
        return await self._end()

    async def failed(self, error: dict[str, str]) -> web.StreamResponse:
        """A plain HTTP error if nothing was sent yet, else the stream's error event."""
        code, message = error.get("code", "error"), error.get("message", "")
        if self.response is None:
            return answer(turn_error_status(code), message, code=code)
        await self._send(stream_error(code, message))
        return await self._end()

    async def _send(self, chunk: dict[str, Any]) -> None:
        await self._write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())

    async def _write(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            if self.response is None:
                self.response = web.StreamResponse(
                    headers={
                        **self.headers,
                        "Content-Type": "text/event-stream",
                        "Cache-Control": "no-store",
                    }
                )
                await self.response.prepare(self.request)
                role = self.completion.chunk({"role": "assistant", "content": ""})
                await self.response.write(f"data: {json.dumps(role)}\n\n".encode())
            await self.response.write(data)
        except (ConnectionError, RuntimeError):  # the client went away: the turn is cancelled
            self.gone = True
            log.info("api_client_gone_mid_stream")

    async def _end(self) -> web.StreamResponse:
        assert self.response is not None
        if not self.gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                self.gone = True
        return self.response


def waiting_note(approvals: list[dict[str, Any]]) -> str:
    """The line a turn that waits for approval ends with: what waits, how to answer."""
    calls = "; ".join(
        f"{call['name']}({call['arguments']}) as approval {short_id(call['id'])}"
        for call in approvals
    )
    first = short_id(approvals[0]["id"])
    return (
        f"[agentd] {calls} waits for your approval: answer with `agentctl approve {first}` "
        f"or `agentctl deny {first} --reason TEXT` (or in the web view); this conversation "
        "takes no new message until then."
    )
