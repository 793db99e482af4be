"""Every answer of the OpenAI-compatible endpoint that is not a completion is an error in
OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``), which its SDKs
raise as typed exceptions: a refused key (401), an unknown agent (404
``model_not_found``), a malformed body (400), a path or method the endpoint does not
serve, a host name it does not answer to (421), a body over its limit (413), and anything
unexpected (500, the details in agentd's log). Never a traceback, never an HTML page.

OpenAI's SDKs send a request again on a 409 or a 5xx, which here would say the user's
message again in a second turn (the first one's is in the log already). Every error but
a 503 (agentd stopping: nothing was done) says ``x-should-retry: false``, which the SDKs
obey.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiohttp import web

from agentd.web.guard import Handler, is_api
from agentd.web.openai_wire import ErrorType, error_body
from shared.errors import (
    AgentdError,
    ApiKeyRefused,
    ApprovalPending,
    MemoryBusy,
    RequestError,
    ShuttingDown,
    UnknownAgent,
    UnknownConversation,
)

log = structlog.get_logger(__name__)


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not is_api(request):
        return await handler(request)
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text if exc.text and exc.content_type == "text/plain" else exc.reason
        return answer(exc.status, message, code=None)
    except AgentdError as exc:
        return answer(status_of(exc), exc.message, code=exc.code, param=getattr(exc, "param", None))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("api_request_crashed", path=request.path)
        return answer(500, "internal error; see the agentd log", code="internal_error")


def status_of(exc: AgentdError) -> int:
    if isinstance(exc, ApiKeyRefused):
        return 401
    if isinstance(exc, UnknownAgent | UnknownConversation):
        return 404
    if isinstance(exc, ApprovalPending):
        return 409
    if isinstance(exc, RequestError):
        return 400
    if isinstance(exc, ShuttingDown | MemoryBusy):
        return 503
    return 500


def turn_error_status(code: str) -> int:
    """The status of a turn that ended with an error: the provider's failure is a bad
    gateway, a request too large for the model's window a bad request."""
    if code in ("context_overflow", "prompt_floor"):
        return 400
    return 502 if code.startswith("provider_") else 500


def answer(
    status: int, message: str, *, code: str | None, param: str | None = None
) -> web.Response:
    headers = {"x-should-retry": "true" if status == 503 else "false"}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    body = error_body(message, kind=_kind(status), code=code, param=param)
    return web.json_response(body, status=status, headers=headers)


def stream_error(code: str, message: str) -> dict[str, Any]:
    """The error event of a stream that already began (the SDKs raise it as ``APIError``)."""
    return error_body(message, kind=_kind(turn_error_status(code)), code=code)


def _kind(status: int) -> ErrorType:
    if status == 401:
        return "authentication_error"
    return "server_error" if status >= 500 else "invalid_request_error"
