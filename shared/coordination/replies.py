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
