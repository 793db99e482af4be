"""What every page handler needs: the daemon (through its narrow interface for the view,
:class:`agentd.daemon.web_interface.DaemonForWeb`), the web server (sessions, port), the
templates and the user's time zone, kept on the aiohttp application."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from agentd.daemon.api_clients import ApiConversations
from agentd.daemon.web_interface import DaemonForWeb
from agentd.web.guard import session_of
from shared.clock import user_zone
from shared.message_refs import short_id

if TYPE_CHECKING:
    from agentd.web.server import WebServer

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True, slots=True)
class WebContext:
    server: WebServer
    daemon: DaemonForWeb
    api_conversations: ApiConversations
    """Which conversation each client of the OpenAI-compatible endpoint talks in."""
    templates: Environment
    zone: tzinfo
    zone_name: str

    @property
    def port(self) -> int:
        assert self.server.port is not None, "requests arrive only once the site listens"
        return self.server.port

    @classmethod
    def of(cls, request: web.Request) -> WebContext:
        return request.app[CONTEXT]

    @classmethod
    def build(cls, server: WebServer, daemon: DaemonForWeb) -> WebContext:
        zone, zone_name = user_zone(server.settings.timezone)
        templates = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        templates.filters["when"] = lambda value: _when(value, zone)
        templates.filters["short_id"] = short_id
        return cls(server, daemon, ApiConversations(daemon.agents), templates, zone, zone_name)


CONTEXT = web.AppKey("agentd_web", WebContext)


def render(
    request: web.Request, template: str, values: dict[str, Any], *, status: int = 200
) -> web.Response:
    """``template`` with ``values``, the session's CSRF token (for the page's script) and
    the user's zone name."""
    ctx = WebContext.of(request)
    session = session_of(request)
    html = ctx.templates.get_template(template).render(
        **values,
        csrf=session.csrf if session is not None else "",
        zone=ctx.zone_name,
    )
    return web.Response(text=html, content_type="text/html", status=status)


def _when(value: datetime | str | None, zone: tzinfo) -> str:
    """A time as the user reads it: their zone, to the second."""
    if value is None or value == "":
        return "-"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")
