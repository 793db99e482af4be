"""The agentd socket protocol: JSON lines over a Unix socket. Standard library only.

``agentctl`` imports this module and only its standard-library neighbours
(:mod:`shared.home`, :mod:`shared.message_refs`, :mod:`shared.setting_choices`), so it must
stay cheap to import (no pydantic, no litellm, no git). The daemon validates requests with pydantic
models in ``agentd/daemon/requests.py``; this module holds what both sides agree on.

A request is one line: ``{"id": "r1", "op": "chat", "params": {...}}``.
The daemon answers with zero or more event lines for that id,
``{"id": "r1", "event": "tool_call", "data": {...}}``, then exactly one final line,
``{"id": "r1", "ok": true, "result": {...}}`` or
``{"id": "r1", "ok": false, "error": {"code": "unknown_agent", "message": "..."}}``.
Several requests may be in flight on one connection; the id tells their lines apart.
"""

from __future__ import annotations

import json
from typing import Any

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 1024 * 1024
"""Largest request line the daemon reads (1 MiB); longer lines are discarded with an error."""

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


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line: compact JSON, UTF-8, newline-terminated."""
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def request(request_id: str, op: str, params: dict[str, Any] | None = None) -> bytes:
    return encode({"id": request_id, "op": op, "params": params or {}})
