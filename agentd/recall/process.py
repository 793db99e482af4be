"""The recall process: the daemon's recall index, served over a socket pair.

Why a process of its own: a rebuild reads and analyzes every log (minutes of CPU at a
million messages), and its Python half, run in the daemon's threads, would share the
daemon's interpreter lock with the event loop: every time the loop gives the lock up
(each socket or file call of every turn) it would then wait for the build to hand it
back (``tests/bench/loop_bench.py`` measured tens of milliseconds of lag that way). Here
the index, its catch-up on the logs, its commits and the searches all run beside the
daemon instead of inside it; the daemon only sends frames (:mod:`agentd.recall.frames`).
It imports no message model (pydantic) and no numpy, so it answers its first search a
few tenths of a second after it is spawned.

Started by :class:`agentd.recall.client.RecallClient` as
``python -m agentd.recall.process FD HOME LEVEL FORMAT``; it exits when the daemon closes
its end (an orderly stop has asked it to commit what it was sent first; after a crash of
the daemon nothing is lost, since the logs are the source of truth).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

import structlog

from agentd.recall.frames import CALLS, encode, read_frame_async
from agentd.recall.service import RecallService
from shared.errors import AgentdError
from shared.logging import configure
from shared.store.layout import Layout

log = structlog.get_logger(__name__)


class RecallServer:
    """Applies the daemon's frames to one :class:`RecallService`, in the order sent."""

    def __init__(self, service: RecallService, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.writer = writer
        self._calls: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader) -> None:
        """Until the daemon closes its end."""
        while (frame := await read_frame_async(reader)) is not None:
            kind, *fields = frame
            if kind == "start":
                self.service.start(*fields)
            elif kind == "drop":
                self.service.drop(*fields)
            elif kind == "append":
                self.service.appended(*fields)
            elif kind == "call":
                task = asyncio.create_task(self._answer(*fields))
                self._calls.add(task)
                task.add_done_callback(self._calls.discard)
            else:
                log.error("recall_frame_unknown", kind=kind)

    async def _answer(self, call_id: int, method: str, args: tuple[Any, ...]) -> None:
        try:
            if method not in CALLS:
                raise AgentdError(f"recall has no call {method!r}")
            value = await self._call(method, args)
            frame = ("answer", call_id, True, value)
        except AgentdError as exc:
            frame = ("answer", call_id, False, exc)
        except Exception as exc:
            log.exception("recall_call_failed", method=method)
            frame = ("answer", call_id, False, AgentdError(f"recall failed: {exc}"))
        self.writer.write(encode(frame))
        await self.writer.drain()

    async def _call(self, method: str, args: tuple[Any, ...]) -> Any:
        if method == "search":
            return await self.service.search(*args)
        if method == "around":
            return await self.service.around(*args)
        if method == "status":
            return self.service.status(*args)
        return await asyncio.to_thread(self.service.flush, *args)


async def serve(fd: int, home: Path) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    service = RecallService(Layout(home))
    log.info("recall_process_started", pid=os.getpid())
    await RecallServer(service, writer).serve(reader)
    log.info("recall_process_stopped", pid=os.getpid())


def main(argv: list[str]) -> None:
    fd, home, level, console_format = argv
    layout = Layout(Path(home))
    configure("recall", level=level, console_format=console_format, log_dir=layout.logs_dir)
    asyncio.run(serve(int(fd), layout.home))
    logging.shutdown()
    # Threads still searching or writing hold nothing the next start needs: every write
    # is a temporary file renamed into place, and the logs hold every message.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
