"""The agentd daemon: a Unix socket speaking JSON lines, and an orderly shutdown.

``Daemon.run()`` is the process entry point (signals, logging already set up);
``await Daemon.serve()`` is the same server for tests. Each request line becomes a task,
so one connection can have several requests in flight; a connection that closes cancels
its unfinished requests (that is how a client's Ctrl-C stops a turn). Bad input of any
kind gets a typed error line and the connection keeps working.

SIGTERM or the ``shutdown`` op: stop accepting, refuse new turns, give turns in flight
``shutdown_grace_s`` to finish, cancel the rest (each records a ``cancelled`` stop in its
transcript), close connections, remove the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from agentd import __version__
from agentd.agents import Agents
from agentd.handlers import Handlers
from agentd.recall import RecallService
from agentd.reflections import Reflections
from agentd.requests import PARAMS, Envelope, describe, parse_params
from agentd.turns import Turns
from shared.clock import Clock, utc_now
from shared.coordination.broker import locate
from shared.errors import (
    AgentdError,
    MalformedRequest,
    PayloadTooLarge,
    ShuttingDown,
    UnknownOp,
)
from shared.protocol import MAX_REQUEST_BYTES, encode
from shared.providers.factory import ProviderFactory
from shared.settings import Settings
from shared.store.layout import Layout

log = structlog.get_logger(__name__)

_READ_CHUNK = 64 * 1024
_TOO_LONG = object()


class AlreadyRunning(AgentdError):
    code = "already_running"


class SocketPathTooLong(AgentdError):
    code = "socket_path_too_long"


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        providers: ProviderFactory | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.settings = settings
        self.layout = Layout(settings.home)
        self.recall = RecallService(self.layout)
        self.agents = Agents(self.layout, on_append=self.recall.on_append, clock=clock)
        self.turns = Turns(
            settings, self.layout, providers or ProviderFactory(settings), self.recall
        )
        self.reflections = Reflections(settings, self.layout, locate(settings), self.agents.store)
        self.handlers = Handlers(settings, self.agents, self.turns, self.recall, self.reflections)
        self._stopping = asyncio.Event()
        self._shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._ops: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
            op: getattr(self.handlers, op.replace(".", "_")) for op in PARAMS if op != "shutdown"
        }

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT or the ``shutdown`` op; return the exit code."""
        try:
            asyncio.run(self.serve(install_signal_handlers=True))
        except (AlreadyRunning, SocketPathTooLong) as exc:
            log.error(exc.code, error=exc.message)
            return 1
        return 0

    def request_shutdown(self) -> None:
        self._stopping.set()

    async def serve(
        self, *, ready: asyncio.Event | None = None, install_signal_handlers: bool = False
    ) -> None:
        path = self.settings.layout.socket_path
        _prepare_socket_dir(path)
        server = await _bind(path, self._on_connection)
        await asyncio.to_thread(self.agents.recover_memory)
        self.recall.start([record.id for record in self.agents.store.list()])
        self.reflections.start()
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_shutdown)
        log.info(
            "agentd_listening",
            socket=str(path),
            version=__version__,
            pid=os.getpid(),
            model=self.settings.model,
        )
        if ready is not None:
            ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._shutdown(server, path)

    async def _shutdown(self, server: asyncio.AbstractServer, path: Path) -> None:
        self._shutting_down = True
        server.close()
        in_flight = {t for t in self._tasks if not t.done()}
        log.info(
            "agentd_stopping", in_flight=len(in_flight), grace_s=self.settings.shutdown_grace_s
        )
        if in_flight:
            _, pending = await asyncio.wait(in_flight, timeout=self.settings.shutdown_grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
            log.info(
                "agentd_requests_stopped",
                finished=len(in_flight) - len(pending),
                cancelled=len(pending),
            )
        await self.reflections.stop()
        for writer in self._connections.values():
            writer.close()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.agents.close()
        log.info("agentd_stopped")

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._connections[me] = writer
        self.handlers.connections += 1
        send_lock = asyncio.Lock()
        mine: set[asyncio.Task[None]] = set()

        async def send(message: dict[str, Any]) -> None:
            async with send_lock:
                writer.write(encode(message))
                await writer.drain()

        try:
            lines = _LineReader(reader, MAX_REQUEST_BYTES)
            while True:
                line = await lines.next()
                if line is None:
                    break
                task = asyncio.create_task(self._handle_line(line, send))
                for group in (mine, self._tasks):
                    group.add(task)
                    task.add_done_callback(group.discard)
        except (ConnectionError, OSError):
            pass
        finally:
            for task in mine:
                task.cancel()
            self.handlers.connections -= 1
            del self._connections[me]
            writer.close()

    async def _handle_line(
        self, line: bytes | object, send: Callable[..., Awaitable[None]]
    ) -> None:
        request_id: str | None = None
        try:
            if line is _TOO_LONG:
                raise PayloadTooLarge(
                    f"request line over {MAX_REQUEST_BYTES:,} bytes was discarded; send less "
                    "(long text belongs in a file)"
                )
            envelope = _envelope(line)  # type: ignore[arg-type]
            request_id = envelope.id
            result = await self._dispatch(envelope, send)
            reply: dict[str, Any] = {"id": request_id, "ok": True, "result": result}
        except AgentdError as exc:
            reply = {"id": request_id, "ok": False, "error": exc.to_dict()}
        except asyncio.CancelledError:
            # Shutdown past its grace, or the client went away: say so if anyone listens.
            cancelled = {
                "code": "cancelled",
                "message": "the request was cancelled (agentd is "
                "stopping, or the client disconnected); what was done is kept",
            }
            with contextlib.suppress(ConnectionError, OSError):
                await send({"id": request_id, "ok": False, "error": cancelled})
            raise
        except Exception as exc:
            log.exception("request_crashed", request_id=request_id)
            error = AgentdError(f"internal error: {exc!r}; see the agentd log")
            reply = {"id": request_id, "ok": False, "error": error.to_dict()}
        with contextlib.suppress(ConnectionError, OSError):
            await send(reply)

    async def _dispatch(
        self, envelope: Envelope, send: Callable[..., Awaitable[None]]
    ) -> dict[str, Any]:
        if envelope.op not in PARAMS:
            raise UnknownOp(f"unknown op {envelope.op!r}; known ops: {', '.join(PARAMS)}")
        params = parse_params(PARAMS[envelope.op], envelope.params)
        if envelope.op == "shutdown":
            self.request_shutdown()
            return {"stopping": True}
        if envelope.op == "chat" and self._shutting_down:
            raise ShuttingDown()

        async def emit(event: str, data: dict[str, Any]) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                await send({"id": envelope.id, "event": event, "data": data})

        with structlog.contextvars.bound_contextvars(request_id=envelope.id, op=envelope.op):
            return await self._ops[envelope.op](params, emit)


def _envelope(line: bytes) -> Envelope:
    try:
        raw = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedRequest(f"request is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise MalformedRequest("request must be a JSON object with id, op and params")
    try:
        return Envelope.model_validate(raw)
    except ValidationError as exc:
        raise MalformedRequest(describe(exc, prefix="request")) from exc


class _LineReader:
    """Newline-delimited frames with a size limit; an oversized line is skipped whole
    (reported as ``_TOO_LONG``) and the next line is read normally."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self.reader = reader
        self.limit = limit
        self.buffer = bytearray()
        self.discarding = False

    async def next(self) -> bytes | object | None:
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                if self.discarding:
                    self.discarding = False
                    return _TOO_LONG
                if line.strip():
                    return line
                continue
            if len(self.buffer) > self.limit:
                self.discarding = True
                self.buffer.clear()
            chunk = await self.reader.read(_READ_CHUNK)
            if not chunk:
                if self.discarding:
                    self.discarding = False
                    return _TOO_LONG
                rest, self.buffer = bytes(self.buffer), bytearray()
                return rest if rest.strip() else None
            if self.discarding:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                self.buffer += chunk
                continue
            self.buffer += chunk


_MAX_SOCKET_PATH_BYTES = 107
"""sun_path holds 108 bytes on Linux, including the terminating NUL."""


def _prepare_socket_dir(path: Path) -> None:
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
        raise SocketPathTooLong(
            f"the socket path {path} is {len(os.fsencode(path))} bytes; Unix sockets allow "
            f"{_MAX_SOCKET_PATH_BYTES}. Set AGENTD_HOME to a shorter directory"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)
        log.warning("stale_socket_removed", socket=str(path))
        return
    finally:
        probe.close()
    raise AlreadyRunning(f"agentd is already running on {path}; stop it first (agentctl shutdown)")


async def _bind(
    path: Path, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
) -> asyncio.AbstractServer:
    old_umask = os.umask(0o177)
    try:
        server = await asyncio.start_unix_server(handler, path=str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    return server
