"""Does a model's API answer? One HTTP request, bounded, that costs nothing.

``agentd doctor`` asks the API base for anything at all: an HTTP status (a 404 for the
bare base URL, a 401 without a key; not a gateway's 502–504) means a server is there; a
refused connection, a name that does not resolve or silence for :data:`PROBE_TIMEOUT_S`
means every chat turn would fail the same way. No key is sent, and no model is called.
"""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

PROBE_TIMEOUT_S = 2.0
KNOWN_BASES = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
"""Where a provider's requests go when no API base is set and litellm names none."""
UNAVAILABLE = {502, 503, 504}
"""Statuses that say no usable server is behind the URL (a proxy or gateway may answer)."""


@dataclass(frozen=True)
class Answer:
    ok: bool
    detail: str
    """``HTTP 404``, or why nothing answered (``refuses connections``)."""


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> Answer:
    """One GET of ``url``: any HTTP answer is a server there."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=timeout_s) as reply:
            return _status(reply.status)
    except urllib.error.HTTPError as exc:
        return _status(exc.code)
    except urllib.error.URLError as exc:
        return Answer(False, _why(exc.reason, timeout_s))
    except (OSError, ValueError) as exc:  # a timeout while reading, a malformed URL
        return Answer(False, _why(exc, timeout_s))


def _status(code: int) -> Answer:
    if code in UNAVAILABLE:
        return Answer(False, f"answers HTTP {code}: unavailable, or unreachable for a gateway")
    return Answer(True, f"HTTP {code}")


def _why(reason: object, timeout_s: float) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "refuses connections"
    if isinstance(reason, socket.gaierror):
        return "does not resolve (no such host)"
    if isinstance(reason, TimeoutError):
        return f"did not answer within {timeout_s:.0f} s"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({reason.reason or reason})"
    return f"is not reachable ({reason})"
