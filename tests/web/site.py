"""A daemon serving the web view on a free loopback port, an agent whose memory has lines
from every kind of writer, and a plain HTTP client that sends exactly the headers a test
names (so a test can leave out the cookie, the CSRF token or name another Host).

The agent ``ada``:
- ``system/persona.md``: written when the agent was created (``initial``);
- ``system/human.md``: a line a chat turn's tool wrote (``turn``, trailers naming the
  conversation and the assistant message of the tool call) and a line a reflection wrote
  (``reflection``, ``Reflected-Messages`` and ``Job-ID`` as the sub-agent writes them),
  with the reflection's outcome in the log;
- ``notes/unsafe.md``: the user's hand edit holding a ``<script>`` and a
  ``javascript:`` link.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.models.reflection import ReflectionOutcome
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.reflection import events
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.names import model_path
from tests.support.waiting import ceiling

HUMAN = "# The user\n\n- Name: Ada.\n- Works on a TypeScript monorepo."
TURN_LINE = "- Uses pnpm for every project."
REFLECTION_LINE = "- Prefers short answers, in Chinese when tired."
UNSAFE_TEXT = (
    "---\nname: unsafe\ndescription: a trap\n---\n"
    "Before <script>document.title='pwned'</script> after.\n\n"
    "[click](javascript:alert(1))\n"
)
_CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


class HeldProvider(ScriptedProvider):
    """A scripted provider that can hold a turn's next model call until the test lets it
    go: what the turn streamed before it can then be seen while the turn still runs."""

    def __init__(self) -> None:
        super().__init__()
        self._held = asyncio.Event()
        self._hold_at: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.holding = False
        """True while a call waits for :meth:`release`: the turn's input is on disk by then."""

    def hold_call_after(self, calls: int) -> None:
        """Answer ``calls`` more model calls, then hold the next one until :meth:`release`."""
        self._hold_at = len(self.requests) + calls
        self._held = asyncio.Event()

    def release(self) -> None:
        """Let the held call go, whether it has started waiting yet or not."""
        assert self._loop is not None, "no model call was made since hold_call_after"
        self._loop.call_soon_threadsafe(self._held.set)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self._loop = asyncio.get_running_loop()
        if len(self.requests) == self._hold_at:
            self._hold_at = None
            self.holding = True
            try:
                await self._held.wait()
            finally:
                self.holding = False
        return await super().complete(request)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebClient:
    """HTTP/1.1 to the web view, one connection per request, no cookie jar: what is sent
    is what the test says."""

    port: int
    host: str = ""
    cookie: str | None = None
    csrf: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.host = self.host or f"127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=ceiling(60))
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            sent = {"Host": self.host, **self.extra, **(headers or {})}
            if self.cookie is not None:
                sent.setdefault("Cookie", self.cookie)
            if body is not None:
                sent["Content-Length"] = str(len(body))
            for name, value in sent.items():
                connection.putheader(name, value)
            connection.endheaders(body)
            answer = connection.getresponse()
            return Response(answer.status, answer.headers, answer.read().decode())
        finally:
            connection.close()

    def get(self, path: str, headers: dict[str, str] | None = None) -> Response:
        return self.request("GET", path, headers=headers)

    def login(self, url: str) -> Response:
        """Trade the login URL's token for the cookie, then read the CSRF token off a page."""
        path = url.split(str(self.port), 1)[1]
        answer = self.get(path)
        if answer.status == 303:
            cookie = answer.headers["Set-Cookie"].split(";", 1)[0]
            self.cookie = cookie
            found = _CSRF_META.search(self.get("/").body)
            self.csrf = found.group(1) if found else None
        return answer

    def chat(self, path: str, text: str, *, csrf: str | None = None) -> Response:
        headers = {"Content-Type": "application/json"}
        token = csrf if csrf is not None else self.csrf
        if token:
            headers["X-CSRF-Token"] = token
        return self.request("POST", path, json.dumps({"text": text}).encode(), headers)


@dataclass
class Site:
    """What :func:`serve_site` built: where to reach it and what is in it."""

    daemon: DaemonRunner
    provider: HeldProvider
    port: int
    agent_id: str
    conversation_id: str
    memory_dir: Path
    tool_call_message_id: str
    reflected: tuple[str, str]
    reflection_commit: str

    def login_url(self) -> str:
        return self.daemon.result("web.login")["url"]

    def client(self, **kwargs: Any) -> WebClient:
        return WebClient(self.port, **kwargs)

    def logged_in(self) -> WebClient:
        client = self.client()
        assert client.login(self.login_url()).status == 303
        return client

    def messages(self) -> list[dict[str, Any]]:
        params = {"agent": self.agent_id, "conversation": self.conversation_id, "limit": 1000}
        return self.daemon.result("messages.list", params)["messages"]

    @property
    def chat_path(self) -> str:
        return f"/agents/{self.agent_id}/conversations/{self.conversation_id}/chat"


def serve_site(daemon: DaemonRunner, clock: FakeClock) -> Site:
    provider = HeldProvider()
    daemon.start(provider=provider, clock=clock, web="127.0.0.1:0")
    web = daemon.daemon.web  # type: ignore[union-attr]
    assert web.port is not None
    agent = daemon.result("agent.create", {"name": "ada", "human": HUMAN})
    memory_dir = Path(agent["memory_dir"])
    conversation_id = daemon.result("conversation.create", {"agent": "ada"})["id"]
    provider.enqueue(
        tool_reply(
            (
                "edit_file",
                json.dumps(
                    {
                        "path": model_path(memory_dir, "system/human.md"),
                        "old_string": "TypeScript monorepo.\n",
                        "new_string": f"TypeScript monorepo.\n{TURN_LINE}\n",
                    }
                ),
            )
        ),
        text_reply("Noted: pnpm everywhere."),
    )
    chat = {"agent": "ada", "conversation": conversation_id}
    daemon.result("chat", {**chat, "text": "We decided: pnpm for every project from now on."})
    clock.advance(minutes=5)
    provider.enqueue(text_reply("Short answers it is."))
    daemon.result("chat", {**chat, "text": "When I'm tired, keep answers short, in Chinese."})
    messages = daemon.result("messages.list", {**chat, "limit": 100, "order": "asc"})["messages"]
    tool_call = next(m for m in messages if m["tool_calls"])
    user_ids = [m["id"] for m in messages if m["role"] == "user"]
    reflected = (user_ids[0], user_ids[-1])
    sha = _reflection_commit(memory_dir, agent["id"], reflected)
    clock.advance(minutes=5)
    started = clock()
    clock.advance(seconds=42)
    events.append(
        daemon.daemon.agents.layout.reflections_dir(agent["id"]),  # type: ignore[union-attr]
        ReflectionOutcome(
            reflection_id="20270101000000-abcdef12",
            request_id="req-1",
            agent_id=agent["id"],
            conversation_ids=[conversation_id],
            trigger="compaction-event",
            status="merged",
            message="Merged 1 commit",
            commits=[sha[:7]],
            started_at=started,
            finished_at=clock(),
        ),
    )
    written = daemon.result(
        "memory.write", {"agent": "ada", "path": "notes/unsafe.md", "text": UNSAFE_TEXT}
    )
    assert written["commit"]
    return Site(
        daemon=daemon,
        provider=provider,
        port=web.port,
        agent_id=agent["id"],
        conversation_id=conversation_id,
        memory_dir=memory_dir,
        tool_call_message_id=tool_call["id"],
        reflected=reflected,
        reflection_commit=sha,
    )


def _reflection_commit(memory_dir: Path, agent_id: str, reflected: tuple[str, str]) -> str:
    """A commit as a reflection sub-agent makes it (fast-forwarded onto main, as a merge
    does when memory did not move): its author and trailers."""
    human = memory_dir / "system" / "human.md"
    human.write_text(human.read_text() + REFLECTION_LINE + "\n")
    message = (
        "chore(reflection): remember how the user likes answers\n\n"
        f"Agent-ID: {agent_id}~reflection\n"
        f"Parent-Agent-ID: {agent_id}\n"
        f"Reflected-Messages: {reflected[0]}..{reflected[1]}\n"
        "Job-ID: job-7"
    )
    author = f"{agent_id}~reflection <{agent_id}~reflection@agentd.local>"
    _git(memory_dir, "commit", "-q", "-a", f"--author={author}", "-m", message)
    return _git(memory_dir, "rev-parse", "HEAD").strip()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout
