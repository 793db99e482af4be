"""The web view's pages: each reads through the daemon's ops and stores
(:class:`agentd.daemon.web_interface.DaemonForWeb`), with the same validation as the socket (ids
through the request models, memory paths through ``validate_memory_path``), and renders
one template. Git and file reads run in threads.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiohttp import web

from agentd.daemon.requests import (
    AgentTarget,
    ConversationTarget,
    MessagesAround,
    MessagesList,
    RecallSearch,
    parse_params,
)
from agentd.memory.proposals import held_with_diffs
from agentd.web.charts import context_gauge, outcomes_per_day
from agentd.web.context import STATIC, WebContext, render
from agentd.web.guard import FAVICON_PATH, LOGIN_PATH, cookie_name
from agentd.web.memory_file import read_memory_file
from agentd.web.sessions import SESSION_TTL_S
from agentd.web.timeline import read_timeline
from shared.errors import FrontmatterError
from shared.ids import find_message
from shared.memory import frontmatter
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.events import discard
from shared.reflection import events, pause
from shared.reflection.backoff import load_backoff
from shared.store.approvals import waiting_calls
from shared.store.layout import Layout

TRANSCRIPT_MESSAGES = 100
"""Messages a transcript page shows: the newest, those before one (``?before=ID``, the
"older messages" link), or this many around the one linked to (``?at=ID``)."""
TIMELINE_COMMITS = 50
REFLECTIONS_SHOWN = 200


async def login(request: web.Request) -> web.StreamResponse:
    """Trade a one-time token for the session cookie, then go to the agents."""
    ctx = WebContext.of(request)
    session = ctx.server.sessions.redeem(request.query.get("token", ""))
    if session is None:
        return render(
            request,
            "message.html",
            {
                "title": "Login link not valid",
                "text": "This login link was used already or has expired. Run "
                "`agentctl web` for a new one.",
            },
            status=403,
        )
    response = web.Response(status=303, headers={"Location": "/"})
    response.set_cookie(
        cookie_name(ctx.port),
        session.id,
        httponly=True,
        samesite="Strict",
        path="/",
        max_age=int(SESSION_TTL_S),
    )
    return response


async def agents(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    records = await asyncio.to_thread(ctx.daemon.agents.store.list)
    layout = ctx.daemon.agents.layout
    paused = await asyncio.to_thread(lambda: {r.id: _reflection_paused(layout, r) for r in records})
    values = {"agents": records, "paused": paused, "default_model": ctx.server.settings.model}
    return render(request, "agents.html", values)


async def favicon(_request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "favicon.ico", headers={"Content-Type": "image/x-icon"})


async def agent(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    record = await _agent(request)
    repo = ctx.daemon.agents.memory(record.id)
    files = await asyncio.to_thread(_described_files, repo)
    conversations = await asyncio.to_thread(ctx.daemon.agents.conversations, record)
    held = await asyncio.to_thread(held_with_diffs, ctx.daemon.proposals.of(record.id))
    paused = await asyncio.to_thread(_reflection_paused, ctx.daemon.agents.layout, record)
    calls = await asyncio.to_thread(waiting_calls, ctx.daemon.agents.layout, record.id)
    return render(
        request,
        "agent.html",
        {
            "agent": record,
            "files": files,
            "conversations": conversations,
            "proposals": held,
            "paused": paused,
            "waiting": {call["conversation_id"] for call in calls},
        },
    )


async def memory_file(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    record = await _agent(request)
    path = request.query.get("path")
    if not path:
        raise web.HTTPSeeOther(f"/agents/{record.id}")
    repo = ctx.daemon.agents.memory(record.id)
    shown = await asyncio.to_thread(read_memory_file, repo, path)
    return render(request, "memory_file.html", {"agent": record, "file": shown})


async def timeline(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    record = await _agent(request)
    repo = ctx.daemon.agents.memory(record.id)
    reflections_dir = ctx.daemon.agents.layout.reflections_dir(record.id)
    entries = await asyncio.to_thread(read_timeline, repo, reflections_dir, TIMELINE_COMMITS)
    return render(request, "timeline.html", {"agent": record, "entries": entries})


async def reflections(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    record = await _agent(request)
    reflections_dir = ctx.daemon.agents.layout.reflections_dir(record.id)
    outcomes = await asyncio.to_thread(events.read, reflections_dir, tail=REFLECTIONS_SHOWN)
    paused = await asyncio.to_thread(_reflection_paused, ctx.daemon.agents.layout, record)
    return render(
        request,
        "reflections.html",
        {
            "agent": record,
            "outcomes": outcomes[::-1],
            "chart": outcomes_per_day(outcomes, ctx.zone),
            "paused": paused,
        },
    )


async def conversation(request: web.Request) -> web.StreamResponse:
    ctx = WebContext.of(request)
    target = parse_params(
        ConversationTarget,
        {"agent": request.match_info["agent"], "conversation": request.match_info["conversation"]},
    )
    assert isinstance(target, ConversationTarget)
    record = await ctx.daemon.agents.resolve(target.agent)
    at = request.query.get("at")
    before = request.query.get("before")
    if at:
        messages, older = await _around_in_conversation(ctx, record, target.conversation, at)
    else:
        messages, older = await _page_before(ctx, record, target.conversation, before)
    shown = await ctx.daemon.context_show(target, discard)
    budget = shown.model_dump(mode="json")
    waiting = await asyncio.to_thread(
        ctx.daemon.approvals.waiting_in, record.id, shown.conversation_id
    )
    return render(
        request,
        "conversation.html",
        {
            "agent": record,
            "conversation_id": shown.conversation_id,
            "messages": messages,
            "at": at,
            "before": before,
            "older": older,
            "budget": budget,
            "gauge": context_gauge(budget),
            "approvals": waiting,
        },
    )


async def message(request: web.Request) -> web.StreamResponse:
    """A message by id, wherever it is: redirects to its conversation's transcript at it
    (how a reflection's reviewed messages are linked from the gutter)."""
    ctx = WebContext.of(request)
    params = parse_params(
        MessagesAround,
        {
            "agent": request.match_info["agent"],
            "message_id": request.match_info["message_id"],
            "before": 0,
            "after": 0,
        },
    )
    assert isinstance(params, MessagesAround)
    record = await ctx.daemon.agents.resolve(params.agent)
    found = await ctx.daemon.recall.around(record.id, params.message_id, 0, 0)
    if not found:
        raise web.HTTPNotFound(text=f"no message {params.message_id} in this agent's history")
    target = found[0]
    raise web.HTTPSeeOther(
        f"/agents/{record.id}/conversations/{target.conversation_id}?at={target.id}#{target.id}"
    )


async def search(request: web.Request) -> web.StreamResponse:
    """Search-as-you-type over recall: the hits as JSON (the page's script shows them)."""
    ctx = WebContext.of(request)
    query = request.query.get("q", "").strip()
    if not query:
        return web.json_response({"hits": [], "incomplete": None})
    fields: dict[str, Any] = {"agent": request.match_info["agent"], "query": query, "limit": 20}
    if request.query.get("conversation"):
        fields["conversation"] = request.query["conversation"]
    params = parse_params(RecallSearch, fields)
    assert isinstance(params, RecallSearch)
    found = await ctx.daemon.recall_search(params, discard)
    return web.json_response({"hits": found.hits, "incomplete": found.incomplete})


async def _agent(request: web.Request) -> AgentRecord:
    target = parse_params(AgentTarget, {"agent": request.match_info["agent"]})
    assert isinstance(target, AgentTarget)
    return await WebContext.of(request).daemon.agents.resolve(target.agent)


Page = tuple[list[dict[str, Any]], str | None]
"""A transcript page, oldest first, and the id its "older messages" link starts before
(None when the page begins with the conversation's first message)."""


async def _page_before(
    ctx: WebContext, record: AgentRecord, conversation_id: str | None, before: str | None
) -> Page:
    """The :data:`TRANSCRIPT_MESSAGES` messages before ``before`` (a message id, checked
    as the socket checks it), else the newest; one more is asked for, to know whether
    older ones are left."""
    fields: dict[str, Any] = {
        "agent": record.id,
        "conversation": conversation_id,
        "limit": TRANSCRIPT_MESSAGES + 1,
        "order": "desc",
    }
    if before:
        fields["before"] = before
    listing = parse_params(MessagesList, fields)
    assert isinstance(listing, MessagesList)
    newest_first = (await ctx.daemon.messages_list(listing, discard)).messages
    page = newest_first[:TRANSCRIPT_MESSAGES][::-1]
    return page, page[0]["id"] if len(newest_first) > TRANSCRIPT_MESSAGES else None


async def _around_in_conversation(
    ctx: WebContext, record: AgentRecord, conversation_id: str | None, at: str
) -> Page:
    """The transcript around message ``at`` (a full or short id) of this conversation."""
    parse_params(MessagesAround, {"agent": record.id, "message_id": at})  # the id's check
    conversation = ctx.daemon.agents.conversation(record, conversation_id)
    messages = await asyncio.to_thread(list, conversation.log)
    position = find_message(at, [m.id for m in messages], "this conversation")
    start = max(0, position - TRANSCRIPT_MESSAGES // 2)
    page = [m.to_api() for m in messages[start : position + TRANSCRIPT_MESSAGES // 2]]
    return page, page[0]["id"] if start > 0 and page else None


def _reflection_paused(layout: Layout, record: AgentRecord) -> dict[str, str] | None:
    """The agent's reflection pause as the pages show it (a file read: in a thread)."""
    return pause.view(load_backoff(layout.reflections_dir(record.id)).pause, record.name)


def _described_files(repo: MemoryRepo) -> list[tuple[str, str]]:
    """Each memory file's path and the description its frontmatter gives (in a thread:
    git, and YAML for every file)."""
    return [(path, _description(text)) for path, text in repo.read_tree().items()]


def _description(text: str) -> str:
    with contextlib.suppress(FrontmatterError):
        described = frontmatter.parse(text)[0].get("description", "")
        return described if isinstance(described, str) else ""
    return ""


def routes() -> list[web.RouteDef]:
    return [
        web.get(LOGIN_PATH, login),
        web.get(FAVICON_PATH, favicon),
        web.get("/", agents),
        web.get("/agents/{agent}", agent),
        web.get("/agents/{agent}/memory", memory_file),
        web.get("/agents/{agent}/timeline", timeline),
        web.get("/agents/{agent}/reflections", reflections),
        web.get("/agents/{agent}/conversations/{conversation}", conversation),
        web.get("/agents/{agent}/messages/{message_id}", message),
        web.get("/agents/{agent}/search", search),
    ]
