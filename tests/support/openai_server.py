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

With nothing queued it answers :data:`DEFAULT_REPLY_TEXT`. Each request body (parsed JSON)
is appended to ``server.requests``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

CHAT_PATH = "/v1/chat/completions"
DEFAULT_REPLY_TEXT = "ok"


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


@dataclass(frozen=True)
class ScriptedResponse:
    """One queued answer: HTTP status, JSON body, extra headers, and a delay before answering."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=chat_completion)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


class FakeOpenAIServer:
    """An OpenAI-compatible chat completions endpoint on ``127.0.0.1:<free port>``.

    Starts serving on construction; stop it with :meth:`close` or by leaving the ``with``
    block. Thread-safe: handlers run in their own threads.
    """

    def __init__(self) -> None:
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
    ) -> None:
        """Queue the next answer; ``body`` defaults to a plain text completion."""
        response = ScriptedResponse(
            status=status,
            body=body if body is not None else chat_completion(),
            headers=dict(headers or {}),
            delay_s=delay_s,
        )
        with self._lock:
            self._queue.append(response)

    def reset(self) -> None:
        """Forget queued answers and recorded requests (for a server shared between tests)."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.authorizations.clear()

    def close(self) -> None:
        """Stop serving and release the port."""
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
            return self._queue.popleft() if self._queue else ScriptedResponse()

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
                self._send(scripted.status, scripted.body, scripted.headers)

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
