"""The frames the daemon and its recall process exchange over their socket pair.

A frame is a 4-byte big-endian length and a pickle: both ends are this program, started
by one another, so pickle is safe here and spares every message a JSON round trip (the
messages appended, a search's request and hits, the messages around an id).

Daemon to recall process (each a tuple, kind first):

- ``("start", [agent_id, …])``: open these agents' indexes (what is persisted, then the
  logs' tail); sent first to every new process with every agent the daemon knows;
- ``("drop", agent_id)``: forget one (deleted, or about to be opened again);
- ``("append", agent_id, conversation_id, messages, offsets)``: just appended to a log
  (each message as its JSON fields: the recall process never imports the models);
- ``("call", call_id, method, args)``: a request that wants an answer (:data:`CALLS`).

Recall process to daemon: ``("answer", call_id, ok, value)``, where ``value`` is the
result, or the :class:`~shared.errors.AgentdError` raised when ``ok`` is false.

A process reads its frames in order, so a search sent after an append sees it.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")
CALLS = ("search", "around", "status", "flush")
"""What a ``call`` frame may name: the recall service's methods that answer."""
WRITE_AT_STOP_S = 10.0
"""How long an orderly stop waits for what was appended to be committed (well under a
second: appends are committed a fifth of a second after they come)."""


def encode(frame: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def read_frame(sock: socket.socket) -> tuple[Any, ...] | None:
    """The next frame from a blocking socket; None once the other end has closed it."""
    header = _read_exactly(sock, HEADER.size)
    if header is None:
        return None
    body = _read_exactly(sock, HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


async def read_frame_async(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next frame from a stream; None once the other end has closed it."""
    try:
        header = await reader.readexactly(HEADER.size)
        body = await reader.readexactly(HEADER.unpack(header)[0])
    except asyncio.IncompleteReadError:
        return None
    return pickle.loads(body)


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        try:
            count = sock.recv_into(view[received:])
        except OSError:
            return None
        if count == 0:
            return None
        received += count
    return bytes(buffer)
