"""The daemon's side of recall: a :class:`~agentd.recall.service.RecallService` in its own process.

Recall's CPU work (searches, the catch-up on the logs, segment writes and merges) runs in
:mod:`agentd.recall.process` so that it never holds the daemon's interpreter lock (why:
that module's docstring). This class offers the daemon the service's methods and turns
each into frames (:mod:`agentd.recall.frames`):

- ``start``, ``drop`` and ``on_append`` only send, and never wait: appends are called in
  the threads that write the logs, and a slow recall must not slow a turn;
- ``search``, ``around``, ``status`` and ``close`` send a call and await its answer.

One sender thread writes every frame, in the order they were asked for, so a search sees
every append made before it. A reader thread per process settles the answers. When the
process dies, the calls it held fail with :class:`~shared.errors.RecallUnavailable` and a
new one is started with every agent the daemon knows: it opens their persisted indexes
and reads the logs' tail, so appends made meanwhile are not lost (they are in the logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from agentd.recall.access import AgentRecallAccess
from agentd.recall.frames import WRITE_AT_STOP_S, encode, read_frame
from shared.errors import RecallUnavailable
from shared.models.messages import Message
from shared.recall.ranking import Found, SearchRequest
from shared.settings import Settings
from shared.store.conversations import Conversation

log = structlog.get_logger(__name__)

RECALL_MODULE = "agentd.recall.process"
"""What the recall process runs (``python -m``): a test names a module that wraps it."""
RESPAWN_DELAY_S = 1.0
"""The least time between two starts of the recall process: one that dies at once (a
broken install, say) is started again once a second, not in a tight loop."""
STATUS_TIMEOUT_S = 5.0
"""How long ``status`` waits for the process before it reports it as not answering."""
EXIT_WAIT_S = 5.0
"""How long a stop waits for the process to exit once its socket is closed."""


class RecallProcess(Protocol):
    """What the client needs of a started recall process (a ``subprocess.Popen`` is one)."""

    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status; ``subprocess.TimeoutExpired`` if it runs on past ``timeout``."""
        ...

    def kill(self) -> None: ...


SpawnRecall = Callable[[socket.socket, list[str]], RecallProcess]
"""Starts :data:`RECALL_MODULE`'s ``main`` on ``[FD, *args]`` in a process of its own, in a
process group of its own, with ``sock`` as descriptor FD there."""


def spawn_recall_process(sock: socket.socket, args: list[str]) -> subprocess.Popen[bytes]:
    """``python -m RECALL_MODULE FD *args``: how the daemon starts its recall process."""
    return subprocess.Popen(
        [sys.executable, "-m", RECALL_MODULE, str(sock.fileno()), *args],
        pass_fds=(sock.fileno(),),
        stdin=subprocess.DEVNULL,
        # In a process group of its own: a terminal's Ctrl-C and a stop signal to the
        # daemon's group must not end it before the daemon has had it commit what it was
        # sent. It ends when the daemon closes its socket, or dies.
        process_group=0,
    )


@dataclass(eq=False)
class _Process:
    child: RecallProcess
    sock: socket.socket
    in_flight: set[int] = field(default_factory=set)
    """Calls sent to this process and not answered yet (guarded by the client's lock)."""
    gone: bool = False


class RecallClient:
    def __init__(self, settings: Settings, spawn: SpawnRecall = spawn_recall_process) -> None:
        """``spawn`` starts each recall process: the tests' in-process daemons fork theirs
        from a parent that has imported recall already (``tests/support/forked_recall.py``)."""
        self.settings = settings
        self._spawn_process = spawn
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._agents: set[str] = set()
        """Every agent a new process must open (guarded by ``_lock``)."""
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._call_ids = itertools.count(1)
        self._process: _Process | None = None
        self._last_spawn = -RESPAWN_DELAY_S
        self._opened = False
        """Set by the first :meth:`open`: from then on a process runs or is being started."""
        self._closing = False
        self._sender = threading.Thread(target=self._send_frames, name="recall-send", daemon=True)
        self._sender.start()

    @property
    def pid(self) -> int | None:
        """The recall process's, while one runs."""
        process = self._process
        return None if process is None or process.gone else process.child.pid

    @property
    def calls_waiting(self) -> int:
        """Calls sent and not answered yet: a number that stays up means a stuck process."""
        with self._lock:
            return len(self._waiting)

    # --- sending only ----------------------------------------------------------------------

    def open(self, agent_ids: list[str]) -> None:
        """Open the indexes of these agents that are not open yet; the first call starts
        the process."""
        with self._lock:
            new = [agent_id for agent_id in agent_ids if agent_id not in self._agents]
            self._agents.update(new)
            first, self._opened = not self._opened, True
        if new or first:
            self._outbox.put(("start", new))

    def start(self, agent_ids: list[str]) -> None:
        """Open these agents' indexes again (an agent restored or imported)."""
        with self._lock:
            self._agents.update(agent_ids)
        self._outbox.put(("start", agent_ids))

    def drop(self, agent_id: str) -> None:
        with self._lock:
            self._agents.discard(agent_id)
        self._outbox.put(("drop", agent_id))

    def on_append(
        self, conversation: Conversation, messages: list[Message], offsets: list[int]
    ) -> None:
        """A ``Conversation`` listener: hand what was just appended to the index (as the
        messages' JSON fields: the recall process never imports the models)."""
        with self._lock:
            self._agents.add(conversation.agent_id)
        fields = [message.model_dump(mode="json") for message in messages]
        self._outbox.put(("append", conversation.agent_id, conversation.id, fields, offsets))

    # --- calls -----------------------------------------------------------------------------

    async def search(self, agent_id: str, request: SearchRequest) -> Found:
        found: Found = await self._call("search", agent_id, request)
        return found

    async def around(
        self, agent_id: str, message_id: str, before: int, after: int
    ) -> list[Message]:
        """The messages around ``message_id`` in its conversation, oldest first (the
        recall process reads their lines; they are parsed here, a line that is not a
        message skipped)."""
        lines: list[bytes] = await self._call("around", agent_id, message_id, before, after)
        messages: list[Message] = []
        for line in lines:
            with contextlib.suppress(ValidationError):
                messages.append(Message.parse_line(line))
        return messages

    async def status(self, agent_id: str) -> dict[str, object]:
        """The index's state and size on disk (see ``RecallService.status``), or what is
        wrong with the process that holds it."""
        if not self._opened:
            return {"state": "not open", "bytes_on_disk": None}
        process = self._process  # None while the sender starts it: the call waits for it
        if process is not None and process.gone:
            return {"state": "restarting", "bytes_on_disk": None}
        try:
            return await asyncio.wait_for(self._call("status", agent_id), STATUS_TIMEOUT_S)
        except (TimeoutError, RecallUnavailable):
            return {"state": "not answering", "bytes_on_disk": None}

    def bind(self, agent_id: str) -> AgentRecallAccess:
        return AgentRecallAccess(self, agent_id)

    async def close(self, timeout_s: float = WRITE_AT_STOP_S) -> None:
        """At an orderly stop: let the process commit what it was sent (for at most
        ``timeout_s``), then close its socket, which ends it. The flush is asked for also
        while the sender is still starting the process: it goes after every frame before
        it, so a stop right after the start still commits them."""
        process = self._process  # None while the sender starts it: the flush waits for it
        if self._opened and (process is None or not process.gone):
            with contextlib.suppress(TimeoutError, RecallUnavailable):
                await asyncio.wait_for(self._call("flush", timeout_s), timeout_s + EXIT_WAIT_S)
        self._closing = True
        self._outbox.put(None)
        await asyncio.to_thread(self._sender.join, EXIT_WAIT_S)
        if self._process is not None:
            await asyncio.to_thread(_end, self._process.child)

    async def _call(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        call_id = next(self._call_ids)
        with self._lock:
            self._waiting[call_id] = (loop, future)
        self._outbox.put(("call", call_id, method, args))
        try:
            return await future
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)

    def _settle(self, call_id: int, ok: bool, value: Any) -> None:
        """Hand an answer (or the error standing for it) to the caller's event loop."""
        with self._lock:
            waiting = self._waiting.pop(call_id, None)
        if waiting is None:  # the caller gave up (cancelled, timed out)
            return
        loop, future = waiting
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
            loop.call_soon_threadsafe(_resolve, future, ok, value)

    # --- the threads -----------------------------------------------------------------------

    def _send_frames(self) -> None:
        """The sender thread: every frame, in order; starts the process when there is none."""
        while (frame := self._outbox.get()) is not None:
            try:
                self._send(frame)
            except Exception:  # one bad frame must not stop every frame after it
                log.exception("recall_frame_not_sent", kind=frame[0])
                self._fail(frame, "it could not be sent")
        process = self._process
        if process is not None:
            with contextlib.suppress(OSError):
                process.sock.shutdown(socket.SHUT_RDWR)

    def _send(self, frame: tuple[Any, ...]) -> None:
        process = self._process
        if process is None or process.gone:
            try:
                process = self._spawn()
            except OSError as exc:
                log.error("recall_process_start_failed", error=str(exc))
                self._fail(frame, "its process could not be started")
                return
            if frame[0] in ("start", "wake"):  # the new process opened every agent
                return
        if frame[0] == "wake":
            return
        data = encode(frame)
        with self._lock:
            if frame[0] == "call":
                process.in_flight.add(frame[1])
        try:
            process.sock.sendall(data)
        except OSError:  # it died: its reader fails what it held and wakes us
            self._fail(frame, "its process stopped")

    def _fail(self, frame: tuple[Any, ...], why: str) -> None:
        if frame[0] == "call":
            self._settle(frame[1], False, RecallUnavailable(why))

    def _spawn(self) -> _Process:
        """Start a recall process and have it open every agent the daemon knows."""
        time.sleep(max(0.0, self._last_spawn + RESPAWN_DELAY_S - time.monotonic()))
        self._last_spawn = time.monotonic()
        ours, theirs = socket.socketpair()
        args = [str(self.settings.home), self.settings.log_level, self.settings.log_format]
        with theirs:
            child = self._spawn_process(theirs, args)
        process = _Process(child, ours)
        with self._lock:
            agents = sorted(self._agents)
        ours.sendall(encode(("start", agents)))
        if self._process is not None:  # closed here, by the one thread that writes to it
            self._process.sock.close()
        self._process = process
        threading.Thread(
            target=self._read_answers, args=(process,), name="recall-answers", daemon=True
        ).start()
        log.info("recall_process_spawned", pid=child.pid, agents=len(agents))
        return process

    def _read_answers(self, process: _Process) -> None:
        """A reader thread: settle each answer; when the process is gone, fail the calls
        it held and, unless the daemon is stopping, have the sender start another."""
        try:
            while (frame := read_frame(process.sock)) is not None:
                _, call_id, ok, value = frame
                with self._lock:
                    process.in_flight.discard(call_id)
                self._settle(call_id, ok, value)
        except Exception:
            log.exception("recall_answer_unreadable")
        with self._lock:
            process.gone = True
            lost, process.in_flight = process.in_flight, set()
        for call_id in lost:
            self._settle(call_id, False, RecallUnavailable("its process stopped"))
        if self._closing:
            return
        code = _end(process.child)
        log.warning("recall_process_died", pid=process.child.pid, exit_code=code)
        self._outbox.put(("wake",))


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _end(child: RecallProcess) -> int:
    """Wait for the process to exit, killing it if it will not."""
    try:
        return child.wait(EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()
