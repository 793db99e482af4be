"""A chat turn from the browser, streamed as server-sent events while it runs.

It is the socket's ``chat`` op (:mod:`agentd.daemon.web_interface`) with the same events
(``assistant``, ``tool_call``, ``tool_result``, ``reflection``, …), then one
``result`` event with the turn's result or one ``error`` event with a typed error. The
request is a POST (it changes the conversation), so it needs the CSRF token; the page's
script reads the stream with ``fetch``, which unlike ``EventSource`` can POST.

A browser that goes away does not stop the turn, as on the socket: it runs on to the
transcript, which the next page load shows.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from pydantic import BaseModel

from agentd.daemon.requests import Chat, parse_params
from agentd.web.context import WebContext
from shared.errors import AgentdError, MalformedRequest, ShuttingDown
from shared.models.events import Emit, Event

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 1_100_000
"""The request body: a message of ``max_message_chars`` (checked by the handler) in JSON."""


async def chat(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    params = parse_params(
        Chat,
        {
            "agent": request.match_info["agent"],
            "conversation": request.match_info["conversation"],
            "text": await _text(request),
        },
    )
    assert isinstance(params, Chat)
    return await streamed(request, "web.chat", lambda emit: ctx.daemon.chat(params, emit))


Run = Callable[[Emit], Awaitable[BaseModel]]
"""An op's call, given the ``emit`` that streams its events; its reply is the ``result``."""


async def streamed(request: web.Request, op: str, run: Run) -> web.StreamResponse:
    """Run a turn (a chat, or an approval's carrying on of one) with its events streamed
    as server-sent events, then its ``result`` or ``error``."""
    if WebContext.of(request).server.stopping:
        raise ShuttingDown()
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    stream = _EventStream(response)
    with structlog.contextvars.bound_contextvars(op=op):
        try:
            result = await run(stream.event)
        except AgentdError as exc:
            await stream.send("error", exc.to_dict())
        else:
            await stream.send("result", result.model_dump(mode="json", by_alias=True))
    await stream.close()
    return response


async def json_body(request: web.Request, shape: str) -> dict[str, Any]:
    """The request's JSON object body; ``shape`` says what it should look like."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedRequest(f"the request body is over {MAX_BODY_BYTES:,} bytes")
    try:
        body = await request.json()
    except ValueError as exc:
        raise MalformedRequest(f"the body must be JSON {shape}: {exc}") from exc
    if not isinstance(body, dict):
        raise MalformedRequest(f"the body must be JSON {shape}")
    return body


async def _text(request: web.Request) -> str:
    """The message from the JSON body ``{"text": ...}``."""
    text = (await json_body(request, '{"text": "..."}')).get("text")
    if not isinstance(text, str):
        raise MalformedRequest('the body must be JSON {"text": "..."}')
    return text


class _EventStream:
    """Server-sent events on ``response``; a browser gone away is noted, not raised."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response
        self.gone = False

    async def event(self, event: Event) -> None:
        """The ``emit`` of the turn: each of its events as one server-sent event."""
        await self.send(event.name, event.data())

    async def send(self, event: str, data: dict[str, Any]) -> None:
        if self.gone:
            return
        payload = json.dumps(data, ensure_ascii=False)
        try:
            await self.response.write(f"event: {event}\ndata: {payload}\n\n".encode())
        except (ConnectionError, RuntimeError):  # reset, or the transport already closed
            self.gone = True
            log.info("web_chat_reader_gone", turn_runs_on=True)

    async def close(self) -> None:
        if not self.gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                self.gone = True
