"""The bearer keys of the OpenAI-compatible endpoint: made, listed and revoked with
``agentctl api-key``, checked on every request to ``/v1/``.

A key is 32 random bytes (``agentd-`` and 43 URL-safe characters), shown once when it is
made. Only its SHA-256 is kept, in ``$AGENTD_HOME/api-keys.json`` (0600, replaced
atomically): a copy of the file opens nothing. A plain hash is enough for a secret this
random; a slow password hash would only slow every request. A check compares the hash of
what was sent with every key's in constant time, and a revoked key stays listed, with
when it was revoked, so ``list`` tells a key that was revoked from one that never existed.

The daemon is the file's one writer (the socket ops below run in it) and reads it once,
at start: a key made or revoked takes effect at once, without a restart. A damaged file
does not stop the daemon (chat on the socket matters more): every key is refused, making
or revoking one is refused rather than writing over it, and ``agentd doctor`` says so.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import datetime
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, Field

from shared.clock import Clock, utc_now
from shared.errors import CorruptStateFile, NameTaken, UnknownApiKey
from shared.ids import new_id
from shared.store.atomic import read_model, write_model_atomic

log = structlog.get_logger(__name__)

KEY_PREFIX = "agentd-"
SHOWN_CHARS = 12
"""How much of a key ``list`` shows (``agentd-AbCd``): enough to tell keys apart."""
BEARER = re.compile(r"Bearer[ \t]+(?P<key>\S+)[ \t]*", re.IGNORECASE)


class ApiKey(BaseModel):
    id: str
    name: str
    sha256: str
    """The key's SHA-256, hex: all that is kept of it."""
    shown: str
    """Its first :data:`SHOWN_CHARS` characters, for people to recognise it."""
    created_at: datetime
    revoked_at: datetime | None = None

    def public(self) -> dict[str, object]:
        """The key as ``agentctl api-key list`` shows it: never its hash."""
        return self.model_dump(mode="json", exclude={"sha256"})


class ApiKeyFile(BaseModel):
    schema_version: Literal[1] = 1
    keys: list[ApiKey] = Field(default_factory=list)


Check = Literal["ok", "missing", "wrong", "revoked"]


class ApiKeys:
    def __init__(self, path: Path, clock: Clock = utc_now) -> None:
        self.path = path
        self.clock = clock
        self.damaged: CorruptStateFile | None = None
        try:
            self._file = read_model(path, ApiKeyFile) or ApiKeyFile()
        except CorruptStateFile as exc:
            log.error("api_keys_unreadable", error=exc.message, effect="every API key is refused")
            self.damaged = exc
            self._file = ApiKeyFile()

    @property
    def active(self) -> list[ApiKey]:
        return [key for key in self._file.keys if key.revoked_at is None]

    def create(self, name: str) -> tuple[ApiKey, str]:
        """A new key named ``name`` (unique among keys not revoked): its record and the
        key itself, which is not kept."""
        self._refuse_if_damaged()
        if any(key.name == name for key in self.active):
            raise NameTaken(f"an API key named {name!r} exists; revoke it or choose another name")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        record = ApiKey(
            id=new_id("key"),
            name=name,
            sha256=_digest(secret),
            shown=secret[:SHOWN_CHARS],
            created_at=self.clock(),
        )
        self._save(ApiKeyFile(keys=[*self._file.keys, record]))
        return record, secret

    def list(self) -> list[ApiKey]:
        return list(self._file.keys)

    def revoke(self, ref: str) -> ApiKey:
        """Revoke the key not yet revoked whose id or name is ``ref``."""
        self._refuse_if_damaged()
        found = next((k for k in self.active if ref in (k.id, k.name)), None)
        if found is None:
            raise UnknownApiKey(
                f"no API key {ref!r} is in use; `agentctl api-key list` shows them (name or id)"
            )
        revoked = found.model_copy(update={"revoked_at": self.clock()})
        keys = [revoked if k.id == found.id else k for k in self._file.keys]
        self._save(ApiKeyFile(keys=keys))
        return revoked

    def check(self, authorization: str | None) -> tuple[Check, ApiKey | None]:
        """What an ``Authorization`` header opens: the key's record when ``ok``."""
        match = BEARER.fullmatch(authorization or "")
        if match is None:
            return "missing", None
        digest = _digest(match["key"])
        found = None
        for key in self._file.keys:  # every one, whatever matched: constant time
            if hmac.compare_digest(key.sha256, digest):
                found = key
        if found is None:
            return "wrong", None
        return ("revoked", None) if found.revoked_at is not None else ("ok", found)

    def _refuse_if_damaged(self) -> None:
        if self.damaged is not None:
            raise self.damaged

    def _save(self, updated: ApiKeyFile) -> None:
        write_model_atomic(self.path, updated)
        self._file = updated


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
