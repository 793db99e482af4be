"""The socket ops behind ``agentctl api-key create|list|revoke``: a part of
:class:`agentd.daemon.handlers.Handlers`, kept apart so the endpoint's keys read in one place.

Only a caller of the daemon's private socket (this user) can make or revoke a key; the
key itself is in the ``create`` answer once and nowhere else (never logged, not kept).
"""

from __future__ import annotations

import asyncio

from agentd.daemon.api_keys import ApiKeys
from agentd.daemon.replies import ApiKeyCreated, ApiKeyList, ApiKeyShown
from agentd.daemon.requests import ApiKeyCreate, ApiKeyRevoke, Params
from agentd.daemon.web_interface import WebForDaemon
from shared.models.events import Emit


class ApiKeyOps:
    api_keys: ApiKeys
    _api_keys_lock: asyncio.Lock
    """One change of the key file at a time (each is written in a thread: it is fsync'd)."""
    web: WebForDaemon

    async def apikey_create(self, params: ApiKeyCreate, _emit: Emit) -> ApiKeyCreated:
        async with self._api_keys_lock:
            record, secret = await asyncio.to_thread(self.api_keys.create, params.name)
        shown = {**record.public(), "key": secret, "endpoint": self.web.api_base}
        return ApiKeyCreated.model_validate(shown)

    async def apikey_list(self, _params: Params, _emit: Emit) -> ApiKeyList:
        keys = self.api_keys.list()
        return ApiKeyList(keys=[ApiKeyShown.model_validate(key.public()) for key in keys])

    async def apikey_revoke(self, params: ApiKeyRevoke, _emit: Emit) -> ApiKeyShown:
        async with self._api_keys_lock:
            revoked = await asyncio.to_thread(self.api_keys.revoke, params.key)
        return ApiKeyShown.model_validate(revoked.public())
