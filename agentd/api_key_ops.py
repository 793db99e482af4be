"""The socket ops behind ``agentctl api-key create|list|revoke``: a part of
:class:`agentd.handlers.Handlers`, kept apart so the endpoint's keys read in one place.

Only a caller of the daemon's private socket (this user) can make or revoke a key; the
key itself is in the ``create`` answer once and nowhere else (never logged, not kept).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentd.api_keys import ApiKeys
from agentd.requests import ApiKeyCreate, ApiKeyRevoke, Params
from agentd.web.server import WebServer
from shared.agent.loop import Emit


class ApiKeyOps:
    api_keys: ApiKeys
    _api_keys_lock: asyncio.Lock
    """One change of the key file at a time (each is written in a thread: it is fsync'd)."""
    web: WebServer

    async def apikey_create(self, params: ApiKeyCreate, _emit: Emit) -> dict[str, Any]:
        async with self._api_keys_lock:
            record, secret = await asyncio.to_thread(self.api_keys.create, params.name)
        return {**record.public(), "key": secret, "endpoint": self.web.api_base}

    async def apikey_list(self, _params: Params, _emit: Emit) -> dict[str, Any]:
        return {"keys": [key.public() for key in self.api_keys.list()]}

    async def apikey_revoke(self, params: ApiKeyRevoke, _emit: Emit) -> dict[str, Any]:
        async with self._api_keys_lock:
            revoked = await asyncio.to_thread(self.api_keys.revoke, params.key)
        return revoked.public()
