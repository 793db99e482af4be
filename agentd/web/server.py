"""The web view's life in the daemon: started with it when ``AGENTD_WEB`` is set, on the
daemon's own event loop, and stopped first when it stops.

aiohttp is imported only when the view is on, so a daemon without it pays nothing. A
port that cannot be bound does not stop the daemon (chat over the socket matters more
than the view): it is logged, and ``agentctl web`` says why there is no view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from agentd.web.address import DEFAULT_WEB_ADDRESS, WebAddress, WebAddressError
from agentd.web.sessions import LOGIN_TOKEN_TTL_S, Sessions
from shared.errors import AgentdError
from shared.settings import Settings

if TYPE_CHECKING:
    from aiohttp import web

    from agentd.handlers import Handlers

log = structlog.get_logger(__name__)


class WebViewOff(AgentdError):
    """``agentctl web`` on a daemon that serves no web view."""

    code = "web_off"


class WebServer:
    def __init__(self, settings: Settings, handlers: Handlers) -> None:
        self.settings = settings
        self.handlers = handlers
        self.sessions = Sessions()
        self.port: int | None = None
        """The port listened on, once started (the asked one, or the kernel's pick for 0)."""
        self.stopping = False
        self._runner: web.AppRunner | None = None
        self._failure: str | None = None
        self.address: WebAddress | None = None
        if settings.web:
            try:
                self.address = WebAddress.parse(settings.web)
            except WebAddressError as exc:
                self._failure = str(exc)

    @property
    def url(self) -> str | None:
        if self.address is None or self.port is None:
            return None
        return f"http://{self.address.netloc(self.port)}"

    async def start(self) -> None:
        if self._failure is not None:
            log.error("web_view_not_started", address=self.settings.web, error=self._failure)
        if self.address is None:
            return
        from aiohttp import web

        from agentd.web.app import build_app

        runner = web.AppRunner(
            build_app(self), access_log=None, shutdown_timeout=self.settings.shutdown_grace_s
        )
        await runner.setup()
        site = web.TCPSite(runner, self.address.host, self.address.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            self._failure = f"{self.address.host}:{self.address.port}: {exc.strerror or exc}"
            log.error("web_view_not_started", address=self.settings.web, error=self._failure)
            return
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("web_view_listening", url=self.url)
        if not self.address.loopback:
            log.warning(
                "web_view_not_loopback",
                address=self.settings.web,
                risk="other machines can reach the login page; only a login token opens it",
                fix=f"AGENTD_WEB={DEFAULT_WEB_ADDRESS} keeps it on this machine",
            )

    async def stop(self) -> None:
        """Refuse new connections and give chats in flight the daemon's shutdown grace
        (aiohttp cancels what is still running after it: the turn records the stop)."""
        self.stopping = True
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def login(self) -> dict[str, Any]:
        """A one-time login URL for ``agentctl web``."""
        if self.address is None and self._failure is None:
            raise WebViewOff(
                "the web view is off: start the stack with `agentd up --web`, or set "
                f"AGENTD_WEB={DEFAULT_WEB_ADDRESS} and restart agentd"
            )
        if self.address is None or self._runner is None or self.url is None:
            raise WebViewOff(
                f"the web view is not serving ({self._failure or 'agentd is stopping'}); "
                "set AGENTD_WEB to a free host:port and restart agentd"
            )
        token = self.sessions.issue_login_token()
        return {
            "url": f"{self.url}/login?token={token}",
            "expires_s": LOGIN_TOKEN_TTL_S,
            "loopback": self.address.loopback,
        }
