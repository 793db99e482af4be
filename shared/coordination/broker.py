"""Where Redis is: a configured URL, or the embedded Valkey's Unix socket in ``run/``.

The embedded server listens only on a Unix socket (no TCP port is opened); Celery and
redis-py spell socket URLs differently, so both spellings are derived here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.settings import Settings


@dataclass(frozen=True)
class RedisLocation:
    redis_url: str
    """For redis-py (``redis://…`` or ``unix:///path?db=0``)."""
    celery_url: str
    """For Celery/kombu (``redis://…`` or ``redis+socket:///path``)."""
    embedded: bool

    @property
    def socket_path(self) -> Path | None:
        if self.redis_url.startswith("unix://"):
            return Path(self.redis_url.removeprefix("unix://").split("?", 1)[0])
        return None


def locate(settings: Settings) -> RedisLocation:
    if settings.redis_url:
        url = settings.redis_url
        if url.startswith("unix://"):
            path = url.removeprefix("unix://").split("?", 1)[0]
            return RedisLocation(url, f"redis+socket://{path}", embedded=False)
        return RedisLocation(url, url, embedded=False)
    path = settings.layout.embedded_redis_socket
    return RedisLocation(f"unix://{path}?db=0", f"redis+socket://{path}", embedded=True)
