"""How busy the web view's server is, for the daemon's quiet collections.

The daemon starts its full garbage collections itself when no request has run for a
moment (:mod:`agentd.daemon.garbage_collection`). It counts the socket's requests; without this it
would not see the web's, and twenty clients streaming from the OpenAI-compatible endpoint
looked like a quiet daemon: a full collection held the event loop for a third of a second
in the middle of their replies (tests/bench/stream_bench.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp is imported only when the view is on (agentd/web/server.py)
    from aiohttp.typedefs import Middleware

    from agentd.web.guard import Handler


class Activity:
    """Requests the web view's server has started, and how many run now."""

    def __init__(self) -> None:
        self.started = 0
        self.in_flight = 0

    def middleware(self) -> Middleware:
        """The app's outermost middleware: counts every request, whatever it becomes."""
        from aiohttp import web

        @web.middleware
        async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.started += 1
            self.in_flight += 1
            try:
                return await handler(request)
            finally:
                self.in_flight -= 1

        return count
