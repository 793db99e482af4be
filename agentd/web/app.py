"""The web view's aiohttp application: the guard, the error pages, the routes and the
vendored static files (no CDN, no build step: it works offline), and the
OpenAI-compatible endpoint under ``/v1/`` (:mod:`.openai_api`), whose errors are OpenAI's
shape rather than pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from agentd.web import approvals, chat, memory_notes, openai_api, pages
from agentd.web.context import CONTEXT, STATIC, WebContext, render
from agentd.web.guard import Handler, guard, is_api, security_headers
from agentd.web.openai_errors import openai_errors
from shared.errors import (
    AgentdError,
    InUse,
    MemoryBusy,
    RequestError,
    ShuttingDown,
    UnknownAgent,
    UnknownConversation,
    UnknownMessage,
)

if TYPE_CHECKING:
    from agentd.daemon.web_interface import DaemonForWeb
    from agentd.web.server import WebServer

_NOT_FOUND = (UnknownAgent, UnknownConversation, UnknownMessage)


def build_app(server: WebServer, daemon: DaemonForWeb) -> web.Application:
    assert server.address is not None
    address = server.address

    def port() -> int:
        assert server.port is not None
        return server.port

    def accepts_host(host: str | None) -> bool:
        return address.accepts_host(host, port())

    app = web.Application(
        middlewares=[
            server.activity.middleware(),
            openai_errors,
            guard(server.sessions, accepts_host, port, daemon.api_keys),
            _typed_errors,
        ],
        client_max_size=max(chat.MAX_BODY_BYTES, openai_api.MAX_BODY_BYTES),
    )
    app[CONTEXT] = WebContext.build(server, daemon)
    app.on_response_prepare.append(security_headers)
    app.add_routes(pages.routes())
    app.add_routes([web.post("/agents/{agent}/conversations/{conversation}/chat", chat.chat)])
    app.add_routes(approvals.routes())
    app.add_routes(memory_notes.routes())
    app.add_routes(openai_api.routes())
    app.router.add_static("/static", STATIC)
    return app


def status_of(exc: AgentdError) -> int:
    """The HTTP status of a typed error."""
    if isinstance(exc, _NOT_FOUND):
        return 404
    if isinstance(exc, InUse):
        return 409
    if isinstance(exc, RequestError):
        return 400
    if isinstance(exc, ShuttingDown | MemoryBusy):
        return 503
    return 500


@web.middleware
async def _typed_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A typed error as the socket would say it: an error page, or JSON for the page's
    scripts (search, chat)."""
    try:
        return await handler(request)
    except AgentdError as exc:
        if is_api(request):  # answered in OpenAI's shape (openai_errors)
            raise
        status = status_of(exc)
        if request.method != "GET" or request.path.endswith("/search"):
            return web.json_response({"error": exc.to_dict()}, status=status)
        values = {"title": exc.code, "text": exc.message}
        return render(request, "message.html", values, status=status)
