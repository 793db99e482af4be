"""The agentd daemon: a Unix socket speaking JSON lines, and an orderly shutdown.

``Daemon.run()`` is the process entry point (signals, logging already set up);
``await Daemon.serve()`` is the same server for tests. Each request line becomes a task,
so one connection can have several requests in flight (:mod:`agentd.daemon.connection` says
what a half-close, a hang-up, a client that stops reading and an idle one do). Bad input
of any kind gets a typed error line and the connection keeps working.

The daemon raises its open-file soft limit to the hard limit at start, and serves at
most ``max_connections`` clients (and no more than half its open files allow; the web
view, when on, takes at most an eighth more); one over the cap is told ``busy`` and
closed, so running out of descriptors never leaves new connections hanging in the listen
queue.

Each request runs its op's row of :data:`agentd.daemon.ops.OPS`: params checked, handler run,
reply checked, then sent. The daemon owns the web view (:mod:`agentd.web`, when
``AGENTD_WEB`` is set): it builds it, starts it after the socket and stops it first.

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
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from agentd import __version__
from agentd.daemon.agents import Agents
from agentd.daemon.connection import TOO_LONG, Connection, Send
from agentd.daemon.garbage_collection import QuietCollection
from agentd.daemon.handlers import Handlers
from agentd.daemon.listener import (
    Listener,
    Slots,
    connection_cap,
    listen_at,
    raise_open_file_limit,
)
from agentd.daemon.ops import OPS, TURN_OPS, reply_of
from agentd.daemon.requests import Envelope, describe, parse_params
from agentd.daemon.turns import Turns
from agentd.recall.client import RecallClient
from agentd.reflection.reflections import Reflections
from agentd.web.server import WebServer
from shared.clock import Clock, utc_now
from shared.coordination.broker import locate
from shared.errors import (
    AgentdError,
    AlreadyRunning,
    Busy,
    InternalError,
    MalformedRequest,
    PayloadTooLarge,
    ShuttingDown,
    SocketPathTooLong,
    UnknownOp,
)
from shared.models.events import Event
from shared.priority import favour_the_event_loop
from shared.protocol import MAX_REQUEST_BYTES, encode
from shared.providers.factory import ProviderFactory
from shared.settings import Settings
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        providers: ProviderFactory | None = None,
        clock: Clock = utc_now,
        recall: RecallClient | None = None,
    ) -> None:
        """``recall`` may have been started already (``agentd serve`` does, see its
        ``_run_daemon``); the daemon opens every agent in it that it has not opened."""
        self.settings = settings
        self.layout = Layout(settings.home)
        self.recall = recall or RecallClient(settings)
        self.agents = Agents(
            self.layout,
            on_append=self.recall.on_append,
            clock=clock,
            memory_limits=settings.memory_limits,
        )
        self.turns = Turns(
            settings, self.layout, providers or ProviderFactory(settings), self.recall
        )
        self.reflections = Reflections(
            settings,
            self.layout,
            locate(settings),
            self.agents.store,
            providers=self.turns.providers,
            clock=clock,
        )
        self.web = WebServer(settings)
        """The web view (``AGENTD_WEB``); started after the socket, stopped first."""
        self.handlers = Handlers(
            settings,
            self.agents,
            self.turns,
            self.recall,
            self.reflections,
            web=self.web,
            on_shutdown=self.request_shutdown,
        )
        self._stopping = asyncio.Event()
        self._shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: dict[asyncio.Task[None], Connection] = {}
        web = self.web.activity
        self.quiet_collection = QuietCollection(
            in_flight=lambda: len(self._tasks) + web.in_flight,
            started_elsewhere=lambda: web.started,
        )

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
        raise_open_file_limit()
        cap = connection_cap(
            self.settings.max_connections, share=2, setting="AGENTD_MAX_CONNECTIONS"
        )
        busy = {"id": None, "ok": False, "error": Busy(cap).to_dict()}
        listener = Listener(
            listen_at(path, backlog=self.settings.max_connections),
            self._on_connection,
            slots=Slots(cap),
            busy_line=encode(busy),
            name="socket",
        )
        listener.start()
        self.recall.open([record.id for record in self.agents.store.list()])
        await asyncio.to_thread(self.agents.recover_memory)
        await asyncio.to_thread(self.handlers.approvals.recover)
        self.reflections.start()
        await self.web.start(self.handlers)
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_shutdown)
        favour_the_event_loop()
        collecting = asyncio.create_task(self.quiet_collection.run())
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
            collecting.cancel()
            await self._shutdown(listener, path)

    async def _shutdown(self, listener: Listener, path: Path) -> None:
        self._shutting_down = True
        listener.close()
        await self.web.stop()
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
        for connection in self._connections.values():
            connection.close()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        await self.recall.close()  # bounded: see its docstring
        self.agents.close()
        log.info("agentd_stopped")

    async def _on_connection(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn)
        except OSError as exc:  # the client went away as it was accepted
            log.debug("connection_lost_at_accept", error=str(exc))
            conn.close()
            return
        me = asyncio.current_task()
        assert me is not None
        connection = Connection(
            reader,
            writer,
            self._handle_line,
            requests=self._tasks,
            write_timeout_s=self.settings.write_timeout_s,
            idle_timeout_s=self.settings.idle_timeout_s,
        )
        self._connections[me] = connection
        self.handlers.connections += 1
        try:
            await connection.serve()
        finally:
            self.handlers.connections -= 1
            del self._connections[me]

    async def _handle_line(self, line: bytes | object, send: Send) -> None:
        self.quiet_collection.request_started()
        request_id: str | None = None
        try:
            if line is TOO_LONG:
                raise PayloadTooLarge(
                    f"request line over {MAX_REQUEST_BYTES:,} bytes was discarded; send less "
                    "(long text belongs in a file)"
                )
            # any other line is the bytes the listener read (TOO_LONG is its one marker)
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
            await send({"id": request_id, "ok": False, "error": cancelled})
            raise
        except Exception as exc:
            log.exception("request_crashed", request_id=request_id)
            error = InternalError(f"internal error: {exc!r}; see the agentd log")
            reply = {"id": request_id, "ok": False, "error": error.to_dict()}
        await send(reply)

    async def _dispatch(self, envelope: Envelope, send: Send) -> dict[str, Any]:
        op = OPS.get(envelope.op)
        if op is None:
            raise UnknownOp(f"unknown op {envelope.op!r}; known ops: {', '.join(OPS)}")
        params = parse_params(op.params, envelope.params)
        if envelope.op in TURN_OPS and self._shutting_down:
            raise ShuttingDown()

        async def emit(event: Event) -> None:
            await send({"id": envelope.id, "event": event.name, "data": event.data()})

        with structlog.contextvars.bound_contextvars(request_id=envelope.id, op=envelope.op):
            return reply_of(envelope.op, await op.handler(self.handlers, params, emit))


def _envelope(line: bytes) -> Envelope:
    """The request's envelope. Not valid JSON includes what Python's parser refuses
    beyond the grammar: nesting deeper than its recursion limit, integers over 4,300
    digits. (Strings holding a lone surrogate are refused by the models.)"""
    try:
        raw = json.loads(line)
    except RecursionError as exc:
        raise MalformedRequest("request is not valid JSON: nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise MalformedRequest(f"request is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise MalformedRequest("request must be a JSON object with id, op and params")
    try:
        return Envelope.model_validate(raw)
    except ValidationError as exc:
        raise MalformedRequest(describe(exc, prefix="request")) from exc


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
