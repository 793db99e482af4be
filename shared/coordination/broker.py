"""Where Redis is: a configured URL, or the embedded Valkey's Unix socket in ``run/``.

The embedded server listens on a Unix socket, and on TCP only when ``AGENTD_REDIS_LISTEN``
asks it to (for workers on other hosts), then always with a password
(``AGENTD_REDIS_PASSWORD``, which every client of it sends, the socket's included). Celery
and redis-py spell socket URLs differently, so both spellings are derived here.

``rediss://`` is Redis over TLS. redis-py reads the certificate settings from the URL
(``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``); Celery's broker
does not, and without them kombu connects *without checking the server's certificate*,
so they are handed to Celery as ``broker_use_ssl`` (:attr:`RedisLocation.celery_ssl`),
the certificate required unless the URL says ``ssl_cert_reqs=none``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from shared.settings import Settings

if TYPE_CHECKING:
    import redis
    import redis.asyncio as aioredis

SSL_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


@dataclass(frozen=True)
class RedisLocation:
    redis_url: str
    """For redis-py (``redis://…``, ``rediss://…`` or ``unix:///path?db=0``)."""
    celery_url: str
    """For Celery/kombu (``redis://…`` or ``redis+socket:///path``)."""
    embedded: bool
    timeout_s: float
    """How long a call may go unanswered (``AGENTD_REDIS_TIMEOUT_S``): every client made
    here, and Celery's connection, is bounded by it."""
    celery_ssl: dict[str, Any] | None = field(default=None)
    """Celery's ``broker_use_ssl`` for a ``rediss://`` URL."""

    @property
    def socket_path(self) -> Path | None:
        if self.redis_url.startswith("unix://"):
            return Path(urlsplit(self.redis_url).path)
        return None

    def client(self) -> redis.Redis:
        """A redis-py client, each call bounded by :attr:`timeout_s` (connect and read)."""
        import redis

        return redis.Redis.from_url(
            self.redis_url, socket_connect_timeout=self.timeout_s, socket_timeout=self.timeout_s
        )

    def async_client(self, blocks_s: float = 0.0) -> aioredis.Redis:
        """An asyncio client bounded the same way; ``blocks_s`` is how long its longest
        blocking read (``XREAD BLOCK``) waits on purpose, added to the read timeout."""
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(
            self.redis_url,
            socket_connect_timeout=self.timeout_s,
            socket_timeout=self.timeout_s + blocks_s,
        )


def locate(settings: Settings) -> RedisLocation:
    timeout_s = settings.redis_timeout_s
    if settings.redis_url:
        url = settings.redis_url
        if url.startswith("unix://"):
            parts = urlsplit(url)
            celery_url = _socket_url(parts.path, parts.password)
            return RedisLocation(url, celery_url, embedded=False, timeout_s=timeout_s)
        if url.startswith("rediss://"):
            return _tls(url, timeout_s)
        return RedisLocation(url, url, embedded=False, timeout_s=timeout_s)
    path = settings.layout.embedded_redis_socket
    password = settings.redis_password
    auth = f":{quote(password, safe='')}@" if password else ""
    return RedisLocation(
        f"unix://{auth}{path}?db=0",
        _socket_url(str(path), password),
        embedded=True,
        timeout_s=timeout_s,
    )


def _socket_url(path: str, password: str | None) -> str:
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis+socket://{auth}{path}"


def _tls(url: str, timeout_s: float) -> RedisLocation:
    """A ``rediss://`` URL for redis-py (certificate required unless it says otherwise),
    and for Celery without the certificate settings, which go to ``broker_use_ssl``."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("ssl_cert_reqs", "required")
    reqs = query["ssl_cert_reqs"].lower().removeprefix("cert_")
    if reqs not in _CERT_REQS:
        raise ValueError(
            f"ssl_cert_reqs={query['ssl_cert_reqs']} in AGENTD_REDIS_URL: use required, "
            "optional or none"
        )
    celery_ssl: dict[str, Any] = {"ssl_cert_reqs": _CERT_REQS[reqs]}
    for name in SSL_OPTIONS[1:]:
        if query.get(name):
            celery_ssl[name] = query[name]
    rest = {name: value for name, value in query.items() if name not in SSL_OPTIONS}
    redis_url = urlunsplit(parts._replace(query=urlencode(query)))
    celery_url = urlunsplit(parts._replace(query=urlencode(rest)))
    return RedisLocation(
        redis_url, celery_url, embedded=False, timeout_s=timeout_s, celery_ssl=celery_ssl
    )


def reach(location: RedisLocation) -> str | None:
    """Why Redis at ``location`` cannot be used, in words that say what to do; None when it
    answers (after authenticating, when it asks for a password)."""
    import redis

    where = _where(location.redis_url)
    timeout_s = location.timeout_s
    try:
        client = location.client()
        try:
            client.ping()
        finally:
            client.close()
    except redis.AuthenticationError as exc:
        if urlsplit(location.redis_url).password:
            return (
                f"Redis at {where} refused the password ({exc}): put the right one in "
                "AGENTD_REDIS_URL (redis://:PASSWORD@host:port/0)"
            )
        return (
            f"Redis at {where} asks for a password ({exc}): give it in AGENTD_REDIS_URL "
            "(redis://:PASSWORD@host:port/0)"
        )
    except redis.TimeoutError as exc:
        return (
            f"Redis at {where} did not answer within {timeout_s:.0f} s ({exc}): check the host "
            "and port in AGENTD_REDIS_URL, and that the network lets this host reach it"
        )
    except redis.ConnectionError as exc:
        if "SSL" in str(exc) or "certificate" in str(exc):
            return (
                f"the TLS handshake with Redis at {where} failed ({exc}): check that it "
                "speaks TLS and that ssl_ca_certs in AGENTD_REDIS_URL names its CA"
            )
        return (
            f"cannot reach Redis at {where} ({exc}): start it, or correct the host and "
            "port in AGENTD_REDIS_URL (and the network between the hosts)"
        )
    except redis.RedisError as exc:
        return f"Redis at {where} answered with an error ({exc})"
    return None


def _where(url: str) -> str:
    """Where ``url`` points, without its password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}"
