"""Redis replies as bytes.

Every client agentd makes leaves ``decode_responses`` off, so a stored value comes back as
bytes; redis-py types its replies ``bytes | str`` (for clients that decode). This is the
one place that narrows them, so the code reading a value works on one type.
"""

from __future__ import annotations

from typing import Any


def as_bytes(value: bytes | str | None) -> bytes | None:
    """``value`` as bytes (a client that decodes would give str: encoded back)."""
    return value.encode() if isinstance(value, str) else value


def all_bytes(values: list[Any]) -> list[bytes | None]:
    """The values of one multi-key reply (``MGET``), each as :func:`as_bytes` gives it."""
    return [as_bytes(value) for value in values]


StreamEntry = tuple[bytes, dict[bytes, bytes]]
"""One entry of a Redis stream: its id and its fields."""


def stream_entries(reply: Any) -> list[StreamEntry]:
    """The entries of an ``XREAD`` reply (``[[stream, [(id, fields), …]], …]``, or None
    when the read timed out), in order: redis-py types the reply for every protocol
    version and decoding at once."""
    return [entry for _stream, entries in reply or [] for entry in entries]


def range_entries(reply: Any) -> list[StreamEntry]:
    """The entries of an ``XRANGE`` or ``XREVRANGE`` reply (``[(id, fields), …]``)."""
    return list(reply or [])
