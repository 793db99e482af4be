"""Errors of how agentd is set up and reached: Redis, its socket, the web view and its
address, the OpenAI-compatible endpoint's keys.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class RedisUnavailable(AgentdError):
    """Redis (the embedded Valkey, or the configured one) cannot be started or reached."""

    code = "redis_unavailable"


class AlreadyRunning(AgentdError):
    """A daemon already answers on this ``AGENTD_HOME``'s socket."""

    code = "already_running"


class SocketPathTooLong(AgentdError):
    """The socket's path is over what a Unix socket address holds (108 bytes)."""

    code = "socket_path_too_long"


class WebViewOff(AgentdError):
    """``agentctl web`` on a daemon that serves no web view."""

    code = "web_off"


class WebAddressError(AgentdError):
    """``AGENTD_WEB`` is not ``host:port``."""

    code = "invalid_web_address"


class ApiKeyRefused(AgentdError):
    """A request to the endpoint with no key, a wrong one or a revoked one (HTTP 401)."""

    code = "invalid_api_key"
