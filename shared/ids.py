"""Identifiers: validation of anything user-supplied, and sortable ids for what we create.

An id becomes a directory name, so nothing reaches the file system unless it matches
``[A-Za-z0-9_-]{1,64}``. Created ids are ULID-like (48-bit millisecond time + 80 random
bits, Crockford base32) and monotonic within a process, so sorting ids sorts by creation
order even inside one millisecond: the message log, listings and cursors rely on it.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Sequence

from shared.errors import AmbiguousMessage, InvalidId, UnknownMessage
from shared.message_refs import names_message

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
REFLECTION_SUFFIX = "~reflection"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def validate_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidId` naming ``what``."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        shown = repr(value)[:80]
        raise InvalidId(f"{what} {shown} is not valid: use 1-64 letters, digits, '_' or '-'")
    return value


def validate_agent_id(value: object, *, allow_reflection: bool = False) -> str:
    """Agent ids, optionally with the ``~reflection`` suffix used by reflection sub-agents."""
    if allow_reflection and isinstance(value, str) and value.endswith(REFLECTION_SUFFIX):
        validate_id(value[: -len(REFLECTION_SUFFIX)], "agent id")
        return value
    return validate_id(value, "agent id")


class _MonotonicUlid:
    """ULIDs that sort in creation order even within one millisecond.

    The random part comes from :mod:`random`'s shared generator, not ``os.urandom``: ids
    need to be unique, not secret, and a system call per id is a moment the daemon's
    event loop may wait to run again. Python reseeds that generator in every forked child,
    and a child forgets the parent's last id (:meth:`start_over`), so prefork workers
    forked within one millisecond never count up from the same id."""

    def __init__(self) -> None:
        self.start_over()

    def start_over(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0

    def next(self) -> str:
        with self._lock:
            now_ms = time.time_ns() // 1_000_000
            if now_ms <= self._last_ms:
                now_ms = self._last_ms
                rand = self._last_rand + 1
            else:
                rand = random.getrandbits(79)
            self._last_ms, self._last_rand = now_ms, rand
        value = (now_ms << 80) | (rand & ((1 << 80) - 1))
        out = []
        for _ in range(26):
            out.append(_CROCKFORD[value & 31])
            value >>= 5
        return "".join(reversed(out))


_ULID = _MonotonicUlid()
os.register_at_fork(after_in_child=_ULID.start_over)


def find_message(ref: str, ids: Sequence[str], where: str) -> int:
    """The position in ``ids`` of the one message ``ref`` names; :class:`UnknownMessage`
    when none does, :class:`AmbiguousMessage` when a short form (the id's last characters,
    which are random bits) names several."""
    if ref in ids:
        return ids.index(ref)
    found = [position for position, message_id in enumerate(ids) if names_message(ref, message_id)]
    if not found:
        raise UnknownMessage(f"no message {ref} in {where}")
    if len(found) > 1:
        raise AmbiguousMessage(
            f"{ref} is the end of {len(found)} message ids in {where}: give more of the id "
            f"(--json shows it whole)"
        )
    return found[0]


def new_id(prefix: str) -> str:
    """A new sortable id such as ``msg-01JD3…``; ``prefix`` says what it names."""
    return f"{prefix}-{_ULID.next()}"
