"""Approve or deny a waiting tool call from the conversation page; the turn it carries on
streams as a chat does (:func:`agentd.web.chat.streamed`).

The same rules as the page's chat: a POST, so the guard wants the session cookie and the
CSRF token (:mod:`.guard`); ids are checked by the socket's request models; the answer is
the socket's (``approval.approve`` / ``approval.deny``), once per call. The approval must
belong to the conversation in the URL: a page never answers for another one.
"""

from __future__ import annotations

from typing import Literal

from aiohttp import web

from agentd.daemon.requests import ApprovalDeny, ConversationTarget, parse_params
from agentd.web.chat import json_body, streamed
from agentd.web.context import WebContext
from shared.errors import MalformedRequest


async def approve(request: web.Request) -> web.StreamResponse:
    return await _answer(request, approve=True)


async def deny(request: web.Request) -> web.StreamResponse:
    return await _answer(request, approve=False)


async def _answer(request: web.Request, *, approve: bool) -> web.StreamResponse:
    ctx = WebContext.of(request)
    where = parse_params(
        ConversationTarget,
        {"agent": request.match_info["agent"], "conversation": request.match_info["conversation"]},
    )
    assert isinstance(where, ConversationTarget) and where.conversation is not None
    reason = (await json_body(request, '{"reason": "..."}')).get("reason") or None
    if reason is not None and not isinstance(reason, str):
        raise MalformedRequest('the body must be JSON {"reason": "..."}')
    answer = parse_params(
        ApprovalDeny, {"approval": request.match_info["approval"], "reason": reason}
    )
    assert isinstance(answer, ApprovalDeny)
    record = await ctx.daemon.agents.resolve(where.agent)
    within = (record.id, where.conversation)
    decision: Literal["approved", "denied"] = "approved" if approve else "denied"
    return await streamed(
        request,
        f"web.{decision}",
        lambda emit: ctx.daemon.approvals.answer(
            answer.approval, decision, None if approve else answer.reason, emit, within=within
        ),
    )


def routes() -> list[web.RouteDef]:
    base = "/agents/{agent}/conversations/{conversation}/approvals/{approval}"
    return [web.post(f"{base}/approve", approve), web.post(f"{base}/deny", deny)]
