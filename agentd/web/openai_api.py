"""The OpenAI-compatible endpoint, on the web view's server: the agents as models, a turn
of one as a chat completion.

- ``GET /v1/models`` lists the agents (``id`` is the agent's name), ``GET
  /v1/models/{model}`` one of them.
- ``POST /v1/chat/completions`` runs a turn of the agent named by ``model`` (its name or
  id) in the conversation the client picks (:mod:`agentd.daemon.api_clients`), with the input
  :mod:`.openai_wire` takes from the request, and answers as :mod:`.openai_reply` says:
  streamed with ``stream: true``.

Every request needs a bearer key (``agentctl api-key create``) and a Host header naming
the server (:mod:`.guard`); every error is in OpenAI's shape (:mod:`.openai_errors`).

A client that goes away before its answer is complete (it hung up, Ctrl-C'd its script,
closed its tab) cancels the turn, as Ctrl-C does in ``agentctl chat``: the transcript
keeps what arrived, marked cancelled. A turn waits for nothing after it ends (a
reflection it triggers is told in the agent's next ``agentctl`` turn, not here).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from aiohttp import web
from pydantic import ValidationError

from agentd.daemon.requests import describe
from agentd.web.context import WebContext
from agentd.web.guard import API_KEY, API_PREFIX
from agentd.web.openai_reply import CompletionReply
from agentd.web.openai_wire import Completion, CompletionRequest
from shared.errors import (
    AgentdError,
    BadCompletionRequest,
    InvalidId,
    MalformedRequest,
    ModelNotFound,
    ShuttingDown,
    UnknownAgent,
)
from shared.ids import new_id
from shared.models.agents import AgentRecord

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
"""A request body: clients send their whole history each time, of which only the last
user messages are taken."""
CONVERSATION_HEADER = "X-Agentd-Conversation"
"""Names the conversation to talk in (an id, or ``default``); answered with the one used."""


def routes() -> list[web.RouteDef]:
    return [
        web.get(f"{API_PREFIX}/models", models),
        web.get(f"{API_PREFIX}/models/{{model}}", model),
        web.post(f"{API_PREFIX}/chat/completions", completions),
    ]


async def models(request: web.Request) -> web.Response:
    records = WebContext.of(request).daemon.agents.store.list()
    return web.json_response({"object": "list", "data": [_model(r) for r in records]})


async def model(request: web.Request) -> web.Response:
    return web.json_response(_model(await _agent(request, request.match_info["model"])))


async def completions(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    if ctx.server.stopping:
        raise ShuttingDown()
    body = await _body(request)
    record = await _agent(request, body.model)
    text = body.turn_input()
    ctx.daemon.check_length(text)
    conversation = await ctx.api_conversations.find(
        record, request[API_KEY].name, body.user, request.headers.get(CONVERSATION_HEADER)
    )
    headers = {CONVERSATION_HEADER: conversation.id}
    reply = CompletionReply(request, body, Completion(body.model, new_id("chatcmpl")), headers)
    turn = asyncio.ensure_future(
        ctx.daemon.chat_turn(record, conversation, text, reply.emit, reflection_wait_s=0)
    )
    with structlog.contextvars.bound_contextvars(op="api.chat"):
        try:
            gone = ctx.server.gone(request.transport)
            watched: set[asyncio.Future[Any]] = {turn} if gone is None else {turn, gone}
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:  # the client went away, or agentd is stopping: the turn ends cancelled
            if not turn.done():
                turn.cancel()
                log.info("api_turn_cancelled", client_gone=gone is not None and gone.done())
                with contextlib.suppress(asyncio.CancelledError):
                    await turn
        if turn.cancelled():
            return reply.response or web.Response(status=499)
        try:
            result = turn.result()
        except AgentdError as exc:
            if reply.response is None:
                raise
            return await reply.failed(exc.to_dict())
        return await reply.finish(result)


async def _body(request: web.Request) -> CompletionRequest:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise MalformedRequest(f"the request body is over {MAX_BODY_BYTES:,} bytes")
    try:
        raw = await request.json()
    except ValueError as exc:
        raise MalformedRequest(f"the body must be a JSON object: {exc}") from exc
    if not isinstance(raw, dict):
        raise MalformedRequest("the body must be a JSON object")
    try:
        return CompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise BadCompletionRequest(describe(exc, prefix="body"), param=param) from exc


async def _agent(request: web.Request, ref: str) -> AgentRecord:
    try:
        return await WebContext.of(request).daemon.agents.resolve(ref)
    except (UnknownAgent, InvalidId) as exc:
        raise ModelNotFound(
            f"The model {ref!r} does not exist: it names no agent. GET /v1/models lists them "
            "(`agentctl agents list`)"
        ) from exc


def _model(record: AgentRecord) -> dict[str, object]:
    return {
        "id": record.name,
        "object": "model",
        "created": int(record.created_at.timestamp()),
        "owned_by": "agentd",
    }
