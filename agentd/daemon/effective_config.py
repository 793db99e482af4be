"""The ``config.show`` answer: the settings this daemon runs with, without a secret.

``agentd doctor`` asks for it because the daemon's settings are what count, and they come
from the environment the daemon was started in (a unit's ``EnvironmentFile``, the shell
that ran ``agentd up`` last week), not from the shell doctor runs in. Secrets never
leave: provider keys are named, not shown, and a URL's password is masked.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import BaseModel

from agentd import __version__
from shared.coordination.broker import locate
from shared.providers.credentials import KEY_NAME_PARTS, ProviderKeys
from shared.settings import Settings

MASK = "***"


class EffectiveConfig(BaseModel):
    version: str
    pid: int
    home: str
    model: str
    api_base: str | None
    context_window: int | None
    summary_model: str | None
    reflection_model: str | None
    redis_url: str
    redis_embedded: bool
    provider_keys: list[str] | None
    """Names of the key variables the daemon took from its environment at start; None
    when it left them to litellm (only an in-process test daemon does)."""
    api_key_set: bool
    """Whether ``AGENTD_API_KEY`` (or ``api_key`` in agentd.toml) is set."""
    block_remote_models: bool
    api_endpoint: str | None = None
    """The OpenAI-compatible endpoint's base URL; None while the web view is off."""
    api_keys: int = 0
    """Bearer keys of the endpoint in use (not revoked); never the keys."""
    api_keys_damaged: str | None = None
    """Why the key file could not be read, if it could not (every key is refused)."""


def effective_config(
    settings: Settings,
    keys: ProviderKeys | None,
    *,
    api_endpoint: str | None = None,
    api_keys: int = 0,
    api_keys_damaged: str | None = None,
) -> EffectiveConfig:
    location = locate(settings)
    return EffectiveConfig(
        version=__version__,
        pid=os.getpid(),
        home=str(settings.home),
        model=settings.model,
        api_base=redact_url(settings.api_base),
        context_window=settings.context_window,
        summary_model=settings.summary_model,
        reflection_model=settings.reflection_model,
        redis_url=redact_url(location.redis_url) or "",
        redis_embedded=location.embedded,
        provider_keys=None if keys is None else sorted(keys.values),
        api_key_set=settings.api_key is not None,
        block_remote_models=settings.block_remote_models,
        api_endpoint=api_endpoint,
        api_keys=api_keys,
        api_keys_damaged=api_keys_damaged,
    )


def redact_url(url: str | None) -> str | None:
    """``url`` with its password masked, in the user part (``redis://:***@host/0``), and
    any secret-looking query value (``?password=***``, ``?api-key=***``)."""
    if url is None:
        return None
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}:{MASK}@{host}"
    query = [
        (name, MASK if _secret(name) else value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    ]
    if netloc == parts.netloc and not any(_secret(name) for name, _value in query):
        return url
    rebuilt = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{rebuilt}?{urlencode(query, safe='*')}" if query else rebuilt


def _secret(name: str) -> bool:
    return any(part in name.upper() for part in (*KEY_NAME_PARTS, "PASS"))
