"""Remember and Forget on a memory file's page: the socket's ``memory.remember`` and
``memory.forget``, for that file, from the browser.

The same rules as the page's chat: a POST, so the guard wants the session cookie and the
CSRF token (:mod:`.guard`); the body is checked by the socket's request models, and the
commit says it came through the web view (``Via: web``). Forget is two requests, as in
``agentctl forget``: the first lists the lines (nothing changes), the second removes
them, naming the commit the listing was made at, so what goes is what the page showed.
The URL names the agent and the door is always ``web``, whatever the body says. The
answer is the socket's, as JSON; the page then reloads to show the new gutter.
"""

from __future__ import annotations

from aiohttp import web

from agentd.daemon.requests import MemoryForget, MemoryRemember, parse_params
from agentd.web.chat import json_body
from agentd.web.context import WebContext
from shared.models.events import discard


async def remember(request: web.Request) -> web.StreamResponse:
    body = await json_body(request, '{"path": "...", "text": "..."}')
    fields = {**body, "agent": request.match_info["agent"], "via": "web"}
    params = parse_params(MemoryRemember, fields)
    assert isinstance(params, MemoryRemember)
    remembered = await WebContext.of(request).daemon.memory_remember(params, discard)
    return web.json_response(remembered.model_dump(mode="json"))


async def forget(request: web.Request) -> web.StreamResponse:
    body = await json_body(request, '{"path": "...", "pattern": "...", "confirm": false}')
    fields = {**body, "agent": request.match_info["agent"], "via": "web"}
    params = parse_params(MemoryForget, fields)
    assert isinstance(params, MemoryForget)
    answer = await WebContext.of(request).daemon.memory_forget(params, discard)
    return web.json_response(answer.model_dump(mode="json"))


def routes() -> list[web.RouteDef]:
    return [
        web.post("/agents/{agent}/memory/remember", remember),
        web.post("/agents/{agent}/memory/forget", forget),
    ]
