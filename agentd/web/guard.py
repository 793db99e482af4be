"""What every request to the web view must show before a handler runs.

1. **Host**: the Host header names this server (DNS rebinding, see :mod:`.address`);
   else 421, for every path, login and static files included.
2. **Session**: the cookie a login token was traded for; else 401, except for the login
   page itself and the static files (vendored CSS and JS, nothing private).
3. **CSRF**: every request that is not GET or HEAD carries the session's CSRF token in
   the ``X-CSRF-Token`` header; else 403. The cookie is ``SameSite=Strict`` as well, so
   another site's form never carries it; the token covers browsers that ignore that.

The OpenAI-compatible endpoint (``/v1/``) is for programs, not the browser: after the Host
check it takes a bearer key (``Authorization: Bearer KEY``, :mod:`agentd.daemon.api_keys`)
instead of the session and the CSRF token; no key, a wrong one or a revoked one is 401
(in OpenAI's shape, :mod:`.openai_errors`). A page of another site cannot send the
header without a CORS preflight, which nothing here answers.

Every response also gets headers that keep the pages to themselves: a Content-Security-
Policy allowing only this origin's scripts and styles (no inline script at all), no
framing, no referrer (a URL never leaks to a link's target), no caching of pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from agentd.daemon.api_keys import ApiKey, ApiKeys
from agentd.web.sessions import Session, Sessions
from shared.errors import ApiKeyRefused

CSRF_HEADER = "X-CSRF-Token"
SESSION_KEY = web.RequestKey("agentd_session", Session)
"""Where the request's :class:`Session` is kept (``request[SESSION_KEY]``)."""
API_KEY = web.RequestKey("agentd_api_key", ApiKey)
"""The bearer key an endpoint request came with (``request[API_KEY]``)."""
API_PREFIX = "/v1"
_KEY_REFUSED = {
    "missing": "no API key: send `Authorization: Bearer KEY` (`agentctl api-key create NAME` "
    "makes one)",
    "wrong": "wrong API key (`agentctl api-key list` shows the keys in use)",
    "revoked": "this API key was revoked; `agentctl api-key create NAME` makes a new one",
}
LOGIN_PATH = "/login"
FAVICON_PATH = "/favicon.ico"
"""Asked for by browsers on their own, with or without a session: served to anyone, like
the static files (it is one)."""
STATIC_PREFIX = "/static/"
_SAFE_METHODS = frozenset({"GET", "HEAD"})

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cookie_name(port: int) -> str:
    """The session cookie's name. Browsers keep cookies per host, not per port: two
    daemons on one machine (two homes) must not overwrite each other's session."""
    return f"agentd_session_{port}"


def guard(
    sessions: Sessions,
    accepts_host: Callable[[str | None], bool],
    port: Callable[[], int],
    api_keys: ApiKeys,
) -> Middleware:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not accepts_host(request.headers.get("Host")):
            raise web.HTTPMisdirectedRequest(
                text="this server does not answer to that host name; open the URL "
                "`agentctl web` prints"
            )
        if is_api(request):
            state, key = api_keys.check(request.headers.get("Authorization"))
            if key is None:
                raise ApiKeyRefused(_KEY_REFUSED[state])
            request[API_KEY] = key
            return await handler(request)
        if request.path in (LOGIN_PATH, FAVICON_PATH) or request.path.startswith(STATIC_PREFIX):
            return await handler(request)
        session = sessions.find(request.cookies.get(cookie_name(port())))
        if session is None:
            raise web.HTTPUnauthorized(
                text="not logged in (or the daemon restarted): run `agentctl web` for a login link"
            )
        if request.method not in _SAFE_METHODS and not session.csrf_matches(
            request.headers.get(CSRF_HEADER)
        ):
            raise web.HTTPForbidden(
                text="missing or wrong CSRF token: reload the page and try again"
            )
        request[SESSION_KEY] = session
        return await handler(request)

    return check


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` hook: runs for every response, errors and streams too."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    if not request.path.startswith(STATIC_PREFIX):
        response.headers["Cache-Control"] = "no-store"


def is_api(request: web.Request) -> bool:
    """Whether ``request`` is for the OpenAI-compatible endpoint."""
    return request.path == API_PREFIX or request.path.startswith(API_PREFIX + "/")


def session_of(request: web.Request) -> Session | None:
    """The session the guard found; None on the public pages (login, errors before it)."""
    return request.get(SESSION_KEY)
