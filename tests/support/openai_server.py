"""A scriptable OpenAI-compatible HTTP server for tests.

Provider and daemon tests must exercise the real HTTP path (litellm, the openai SDK, httpx)
without touching the network. This module serves ``POST /v1/chat/completions`` from a
stdlib ``ThreadingHTTPServer`` on ``127.0.0.1`` in a background thread and replays queued
responses in order::

    with FakeOpenAIServer() as server:
        server.enqueue(body=chat_completion(text="hi", usage=usage(10, 2)))
        server.enqueue(status=429, body=error_body("slow down"), headers={"Retry-After": "1"})
        ...  # point the client at server.url ("http://127.0.0.1:PORT/v1")
        assert server.requests[0]["messages"][0]["role"] == "system"

With nothing queued it answers ``server.default_response`` (:data:`DEFAULT_REPLY_TEXT`
unless set). Each request body (parsed JSON) is appended to ``server.requests``.

A request with ``"stream": true`` gets the same answer as server-sent events, the way
OpenAI streams it: a first chunk naming the role, the text in pieces (:func:`text_chunks`,
or the ``chunks`` queued), each tool call's id and name and then its arguments, a last
chunk with the finish reason, a usage chunk when ``stream_options.include_usage`` asks for
one, and ``data: [DONE]``. Each piece of text waits ``chunk_delay_s`` first (the server's
own, or the queued answer's): a model producing tokens at a fixed pace. ``hang_after``
stops sending after that many pieces and holds the connection open (a provider that hangs
mid-stream; 0: one that never sends a token; ``server.holding`` is set then) until the
client goes away, the server closes, or :meth:`FakeOpenAIServer.release` lets the stream
go on; ``drop_after`` closes the connection after that many pieces instead, as a server
that dies mid-answer does (the chunked body is left unfinished). ``server.disconnects``
counts the streams a client left before their end.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

CHAT_PATH = "/v1/chat/completions"
DEFAULT_REPLY_TEXT = "ok"
CHUNK_CHARS = 8
"""Characters per streamed piece of text, unless the queued answer gives its pieces."""
_HANG_LIMIT_S = 120.0
"""A hanging stream is given up after this long even if nobody closed it."""


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    *,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """An OpenAI ``usage`` object. As with OpenAI, ``prompt_tokens`` includes ``cached_tokens``."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def tool_call(name: str, arguments: str = "{}", *, id: str = "call-1") -> dict[str, Any]:
    """One entry of ``message.tool_calls``; ``arguments`` is sent verbatim (a JSON string)."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_completion(
    text: str | None = DEFAULT_REPLY_TEXT,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    model: str = "test-model",
) -> dict[str, Any]:
    """A chat completion body with one choice.

    ``finish_reason`` defaults to ``"tool_calls"`` when tool calls are given, else ``"stop"``.
    ``usage`` defaults to 10 prompt and 5 completion tokens.
    """
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage if usage is not None else _default_usage(),
    }


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI error body, e.g. for a 400, 401, 429 or 500 response."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def _default_usage() -> dict[str, Any]:
    return usage(10, 5)


def text_chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of ``size`` characters, as a stream sends it."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_events(
    body: dict[str, Any], pieces: list[str] | None, *, include_usage: bool
) -> list[dict[str, Any]]:
    """The chunks of a streamed ``body`` (a chat completion), in order: the role, the text
    in ``pieces`` (default :func:`text_chunks`), the tool calls, the finish reason, then
    the usage if asked for. Each chunk of text is marked ``"_piece": True`` (stripped
    before sending) so the server knows where to wait."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {
        "id": body.get("id", "chatcmpl-test"),
        "object": "chat.completion.chunk",
        "created": body.get("created", int(time.time())),
        "model": body.get("model", "test-model"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    events = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content")
    if text:
        for piece in pieces if pieces is not None else text_chunks(text):
            events.append({**chunk({"content": piece}), "_piece": True})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        head = {"id": call["id"], "type": "function", "function": {"name": function["name"]}}
        head["function"]["arguments"] = ""
        events.append(chunk({"tool_calls": [{"index": index, **head}]}))
        if function["arguments"]:
            args = {"index": index, "function": {"arguments": function["arguments"]}}
            events.append(chunk({"tool_calls": [args]}))
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and body.get("usage") is not None:
        events.append({**base, "choices": [], "usage": body["usage"]})
    return events


@dataclass(frozen=True)
class ScriptedResponse:
    """One queued answer: HTTP status, JSON body, extra headers, and a delay before answering."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=chat_completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunks: list[str] | None = None
    """How a streamed answer's text is cut (default :func:`text_chunks`)."""
    chunk_delay_s: float | None = None
    """The wait before each piece of streamed text (default: the server's)."""
    hang_after: int | None = None
    """Stop a stream after this many pieces of text and hold it open."""
    drop_after: int | None = None
    """Close a stream's connection after this many pieces of text, its body unfinished."""


class FakeOpenAIServer:
    """An OpenAI-compatible chat completions endpoint on ``127.0.0.1:<free port>``.

    Starts serving on construction; stop it with :meth:`close` or by leaving the ``with``
    block. Thread-safe: handlers run in their own threads.
    """

    def __init__(self, *, chunk_delay_s: float = 0.0) -> None:
        self.chunk_delay_s = chunk_delay_s
        """The wait before each piece of streamed text, unless an answer sets its own."""
        self.disconnects = 0
        """Streams whose client went away before they ended."""
        self.holding = threading.Event()
        """Set while a stream is held (``hang_after``)."""
        self.default_response = ScriptedResponse()
        """The answer when nothing is queued."""
        self._released = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self.requests: list[dict[str, Any]] = []
        """Every request body received on the chat path, oldest first."""
        self.authorizations: list[str | None] = []
        """The ``Authorization`` header of each of ``requests``, in the same order."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="fake-openai-server", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """The API base to hand to clients, ending in ``/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def enqueue(
        self,
        *,
        status: int = 200,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
        chunks: list[str] | None = None,
        chunk_delay_s: float | None = None,
        hang_after: int | None = None,
        drop_after: int | None = None,
    ) -> None:
        """Queue the next answer; ``body`` defaults to a plain text completion. The
        streaming options apply when the request asks for a stream."""
        response = ScriptedResponse(
            status=status,
            body=body if body is not None else chat_completion(),
            headers=dict(headers or {}),
            delay_s=delay_s,
            chunks=chunks,
            chunk_delay_s=chunk_delay_s,
            hang_after=hang_after,
            drop_after=drop_after,
        )
        with self._lock:
            self._queue.append(response)

    def reset(self) -> None:
        """Forget queued answers and recorded requests (for a server shared between tests)."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.authorizations.clear()
            self.disconnects = 0
        self.chunk_delay_s = 0.0
        self.default_response = ScriptedResponse()
        self.holding.clear()
        self._released.clear()

    def release(self) -> None:
        """Let the held stream go on (and any stream held later)."""
        self._released.set()

    def close(self) -> None:
        """Stop serving (hanging streams end) and release the port."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _next_response(
        self, request_body: dict[str, Any], authorization: str | None
    ) -> ScriptedResponse:
        with self._lock:
            self.requests.append(request_body)
            self.authorizations.append(authorization)
            return self._queue.popleft() if self._queue else self.default_response

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != CHAT_PATH:
                    self._send(404, error_body(f"no route {self.path}"), {})
                    return
                try:
                    request_body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, error_body("request body is not JSON"), {})
                    return
                scripted = server._next_response(request_body, self.headers.get("Authorization"))
                if scripted.delay_s:
                    time.sleep(scripted.delay_s)
                if scripted.status == 200 and request_body.get("stream"):
                    self._stream(scripted, request_body)
                else:
                    self._send(scripted.status, scripted.body, scripted.headers)

            def _stream(self, scripted: ScriptedResponse, request_body: dict[str, Any]) -> None:
                options = request_body.get("stream_options") or {}
                events = stream_events(
                    scripted.body, scripted.chunks, include_usage=bool(options.get("include_usage"))
                )
                delay = scripted.chunk_delay_s
                delay = server.chunk_delay_s if delay is None else delay
                total = sum(1 for event in events if event.get("_piece"))
                stop_after = scripted.drop_after
                stop_after = scripted.hang_after if stop_after is None else stop_after
                stop_at = None if stop_after is None else min(stop_after, total)
                try:
                    self.protocol_version = "HTTP/1.1"  # for a chunked body
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    for name, value in scripted.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.flush()
                    pieces = 0
                    for event in events:
                        if stop_at is not None and pieces >= stop_at:
                            stop_at = None
                            if scripted.drop_after is not None:
                                self.connection.shutdown(socket.SHUT_RDWR)
                                return
                            if not self._hold():
                                return
                        if event.pop("_piece", False):
                            pieces += 1
                            if delay:
                                time.sleep(delay)
                        self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                except (BrokenPipeError, ConnectionResetError):
                    with server._lock:
                        server.disconnects += 1

            def _chunk(self, data: bytes) -> None:
                """One piece of a chunked body (an empty one ends it)."""
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _hold(self) -> bool:
                """Send nothing until released (True), or until the client has gone, the
                server closes or the limit passes (False)."""
                server.holding.set()
                self.connection.settimeout(0.05)
                deadline = time.monotonic() + _HANG_LIMIT_S
                try:
                    while not server._closing.is_set() and time.monotonic() < deadline:
                        if server._released.is_set():
                            return True
                        try:
                            if self.connection.recv(1, socket.MSG_PEEK) == b"":
                                break
                        except TimeoutError:
                            continue
                        except OSError:
                            break
                finally:
                    server.holding.clear()
                    self.connection.settimeout(None)
                with server._lock:
                    server.disconnects += 1
                return False

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                payload = json.dumps(body).encode()
                # The client may have given up already (its timeout fired during delay_s).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the per-request stderr line."""

        return Handler
