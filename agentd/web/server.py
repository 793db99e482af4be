"""The web view's life in the daemon: started with it when ``AGENTD_WEB`` is set, on the
daemon's own event loop, and stopped first when it stops.

aiohttp is imported only when the view is on, so a daemon without it pays nothing. A
port that cannot be bound does not stop the daemon (chat over the socket matters more
than the view): it is logged, and ``agentctl web`` says why there is no view.

The port is served by the daemon's own accept loop (:class:`agentd.daemon.listener.Listener`),
not aiohttp's: at most ``web_max_connections`` connections (and an eighth of the open
files) at once, one over that answered ``503`` and closed, so a flood of connections to
the port cannot take the descriptors the socket and the turns need. Each accepted socket
is handed to aiohttp's protocol, watched: a connection that has not sent a whole request
head within ``web_header_timeout_s`` of being accepted is closed (aiohttp itself waits for
a first request as long as it is not sent), and between requests aiohttp's keep-alive
timeout, set to the same, closes one that sends only part of its next. The accept loop
also knows when a connection is gone (:meth:`WebServer.gone`): aiohttp does not cancel a
handler whose client hung up, and the OpenAI-compatible endpoint cancels the turn of a
client that did, as Ctrl-C does (the browser's chat runs on, as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from agentd.daemon.listener import Listener, Slots, connection_cap
from agentd.daemon.replies import WebLogin
from agentd.web.activity import Activity
from agentd.web.address import DEFAULT_WEB_ADDRESS, WebAddress
from agentd.web.sessions import LOGIN_TOKEN_TTL_S, Sessions
from shared.errors import WebAddressError, WebViewOff
from shared.settings import Settings

if TYPE_CHECKING:
    from aiohttp import web

    from agentd.daemon.web_interface import DaemonForWeb

log = structlog.get_logger(__name__)

WEB_FILE_SHARE = 8
"""The web view serves at most this fraction (1/8) of the daemon's open files at once."""
_BUSY_TEXT = b"agentd's web view is serving its limit of connections; try again in a moment\n"
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n\r\n%s"
) % (len(_BUSY_TEXT), _BUSY_TEXT)
"""What a connection over the cap is told before it is closed."""


class WebServer:
    """The view's server; the daemon builds it, then starts it with the daemon's
    interface for the view (:class:`agentd.daemon.web_interface.DaemonForWeb`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions()
        self.activity = Activity()
        """Its requests, counted for the daemon's quiet collections."""
        self.port: int | None = None
        """The port listened on, once started (the asked one, or the kernel's pick for 0)."""
        self.stopping = False
        self._runner: web.AppRunner | None = None
        self._listeners: list[Listener] = []
        self._gone: dict[asyncio.BaseTransport, asyncio.Future[None]] = {}
        """Per open connection, a future done once it is closed."""
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

    @property
    def api_base(self) -> str | None:
        """The OpenAI-compatible endpoint's base URL (what clients call ``base_url``)."""
        return f"{self.url}/v1" if self.url is not None and self._runner is not None else None

    def gone(self, transport: asyncio.BaseTransport | None) -> asyncio.Future[None] | None:
        """A future done once the connection of ``transport`` is closed (None if unknown)."""
        return self._gone.get(transport) if transport is not None else None

    async def start(self, daemon: DaemonForWeb) -> None:
        if self._failure is not None:
            log.error("web_view_not_started", address=self.settings.web, error=self._failure)
        if self.address is None:
            return
        from aiohttp import web

        from agentd.web.app import build_app

        runner = web.AppRunner(
            build_app(self, daemon),
            access_log=None,
            shutdown_timeout=self.settings.shutdown_grace_s,
            keepalive_timeout=self.settings.web_header_timeout_s,
        )
        await runner.setup()
        try:
            sockets = _bind(self.address, backlog=self.settings.web_max_connections)
        except OSError as exc:
            await runner.cleanup()
            self._failure = f"{self.address.host}:{self.address.port}: {exc.strerror or exc}"
            log.error("web_view_not_started", address=self.settings.web, error=self._failure)
            return
        self._runner = runner
        self.port = sockets[0].getsockname()[1]
        slots = Slots(
            connection_cap(
                self.settings.web_max_connections,
                share=WEB_FILE_SHARE,
                setting="AGENTD_WEB_MAX_CONNECTIONS",
            )
        )
        for sock in sockets:
            listener = Listener(sock, self._serve, slots=slots, busy_line=BUSY_RESPONSE, name="web")
            listener.start()
            self._listeners.append(listener)
        log.info("web_view_listening", url=self.url, max_connections=slots.cap)
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
        for listener in self._listeners:
            listener.close()
        self._listeners = []
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _serve(self, conn: socket.socket) -> None:
        """Hand one accepted connection to aiohttp; return once it is closed."""
        runner = self._runner
        if runner is None or runner.server is None:  # stopping
            conn.close()
            return
        protocols = runner.server
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        made: list[asyncio.BaseTransport] = []

        def register(transport: asyncio.BaseTransport) -> None:
            """As the connection is made, before any request on it can run."""
            made.append(transport)
            self._gone[transport] = closed

        def watched() -> _Watched:
            return _Watched(protocols(), closed, self.settings.web_header_timeout_s, register)

        try:
            try:
                await loop.connect_accepted_socket(watched, sock=conn)
            except OSError as exc:  # the client went away as it was accepted
                log.debug("web_connection_lost_at_accept", error=str(exc))
                conn.close()
                return
            await closed
        finally:
            for transport in made:
                self._gone.pop(transport, None)

    def login(self) -> WebLogin:
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
        return WebLogin(
            url=f"{self.url}/login?token={token}",
            expires_s=LOGIN_TOKEN_TTL_S,
            loopback=self.address.loopback,
        )


def _bind(address: WebAddress, *, backlog: int) -> list[socket.socket]:
    """Listening sockets on every address ``address.host`` names (``localhost``: IPv4 and
    IPv6), on one port: the asked one, or the kernel's pick for 0, as aiohttp bound it."""
    infos = socket.getaddrinfo(
        address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if len(sockets) > 1:  # the port the first one got
                sockaddr = (sockaddr[0], sockets[0].getsockname()[1], *sockaddr[2:])
            sock.bind(sockaddr)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _Watched(asyncio.Protocol):
    """aiohttp's protocol for one connection, passed every call; it closes the connection
    if no whole request head (a blank line) arrives within ``header_timeout_s``, and sets
    ``closed`` once the connection is gone (the listener counts it until then)."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        closed: asyncio.Future[None],
        header_timeout_s: float,
        made: Callable[[asyncio.BaseTransport], None],
    ) -> None:
        self._inner = inner
        self._made = made
        self._closed = closed
        self._header_timeout_s = header_timeout_s
        self._deadline: asyncio.TimerHandle | None = None
        self._tail = b""
        """The last bytes received before the head ends, to find a blank line split
        across two reads."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made(transport)
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._header_timeout_s, self._too_slow, transport)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._deadline is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self._deadline.cancel()
                self._deadline = None
            self._tail = seen[-3:]
        self._inner.data_received(data)

    def _too_slow(self, transport: asyncio.BaseTransport) -> None:
        self._deadline = None
        log.debug("web_request_head_timed_out", timeout_s=self._header_timeout_s)
        assert isinstance(transport, asyncio.Transport)  # a stream server's connection
        transport.abort()

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        try:
            self._inner.connection_lost(exc)
        finally:
            with contextlib.suppress(asyncio.InvalidStateError):
                self._closed.set_result(None)
