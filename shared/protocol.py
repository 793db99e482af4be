"""The agentd socket protocol: JSON lines over a Unix socket. Standard library only.

``agentctl`` imports this module and nothing else of ours, so it must stay cheap to
import (no pydantic, no litellm, no git). The daemon validates requests with pydantic
models in ``agentd/requests.py``; this module holds what both sides agree on.

A request is one line: ``{"id": "r1", "op": "chat", "params": {...}}``.
The daemon answers with zero or more event lines for that id,
``{"id": "r1", "event": "tool_call", "data": {...}}``, then exactly one final line,
``{"id": "r1", "ok": true, "result": {...}}`` or
``{"id": "r1", "ok": false, "error": {"code": "unknown_agent", "message": "..."}}``.
Several requests may be in flight on one connection; the id tells their lines apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 1024 * 1024
"""Largest request line the daemon reads (1 MiB); longer lines are discarded with an error."""

SOCKET_NAME = "agentd.sock"
HISTORY_NAME = "history"

ReflectionTrigger = Literal["off", "step-count", "compaction-event"]
"""When an agent reflects: the one spelling the settings, the daemon's requests and
``agentctl sleeptime`` share."""
MergeMode = Literal["auto", "explicit"]
"""How a reflection lands: ``auto`` merges; ``explicit`` waits for the agent's review."""
DEFAULT_MODEL = "default"
"""The model an agent update names to drop the agent's own model for the global one."""

SHORT_ID_CHARS = 8
"""How much of a message id people see: its last 8 characters (40 random bits, see
:mod:`shared.ids`). Every request that takes a message id takes this short form too, while
it names one message only."""


def short_id(message_id: str) -> str:
    return message_id[-SHORT_ID_CHARS:]


def names_message(ref: str, message_id: str) -> bool:
    """Whether ``ref`` names ``message_id``: the id itself, or its short form (its last
    :data:`SHORT_ID_CHARS` or more characters)."""
    return ref == message_id or (len(ref) >= SHORT_ID_CHARS and message_id.endswith(ref))


EVENT_ASSISTANT = "assistant"
"""A reply of the model, whole (``data``: text), once it is in the log."""
EVENT_ASSISTANT_DELTA = "assistant_delta"
"""A piece of the reply being written (``data``: text), as the model streams it; the
``assistant`` event with the whole text follows when the reply is complete."""
EVENT_MODEL_CALL = "model_call"
"""A model call starts (``data``: model, step): until its first piece of text, a tool
call or the next event, the client waits on the model."""
EVENT_TOOL_CALL = "tool_call"
EVENT_TOOL_RESULT = "tool_result"
EVENT_MEMORY_UPDATE = "memory_update"
EVENT_COMPACTION = "compaction"
EVENT_REFLECTION = "reflection"
EVENT_WAITING = "waiting"
EVENT_PROVIDER_RETRY = "provider_retry"
"""A model call failed in a way worth another try; ``data``: reason, delay_s, attempt."""
EVENT_WARNING = "warning"
"""Something the user should fix that does not stop the turn; ``data``: code, message."""
EVENT_ARCHIVE = "archive"
"""A piece of an export archive (``data``: base64), in order; the final line sums them."""
ARCHIVE_CHUNK_BYTES = 512 * 1024
"""Bytes per export event and per import upload (base64: ~700 KiB, under a request line)."""
MAX_ARCHIVE_BYTES = 2 * 1024**3
"""Largest archive an import takes (compressed)."""


def agentd_home() -> Path:
    """The data directory: ``$AGENTD_HOME``, else ``~/.agentd``."""
    configured = os.environ.get("AGENTD_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".agentd"


def socket_path(home: Path | None = None) -> Path:
    return (home or agentd_home()) / "run" / SOCKET_NAME


def history_path(home: Path | None = None) -> Path:
    """``agentctl chat``'s line history (readline's format; private: it holds what was said)."""
    return (home or agentd_home()) / HISTORY_NAME


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line: compact JSON, UTF-8, newline-terminated."""
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def request(request_id: str, op: str, params: dict[str, Any] | None = None) -> bytes:
    return encode({"id": request_id, "op": op, "params": params or {}})
