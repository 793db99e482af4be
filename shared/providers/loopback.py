"""Whether an API base is this machine: remote models can be blocked
(``AGENTD_BLOCK_REMOTE_MODELS``) while a local server stays allowed, and the provider and
``agentd doctor`` must agree on which is which."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(url: str | None) -> bool:
    """Whether ``url`` names this machine (``localhost``, ``127.0.0.1``, ``[::1]``)."""
    host = urlsplit(url).hostname if url else None
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
