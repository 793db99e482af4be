"""Mask secret-shaped values before a log line is written.

A provider echoes part of a rejected key in its error text, a Redis URL carries its
password, a tool's command line holds a bearer token: any of them can reach a log
field. :func:`redact_secrets` is the structlog processor every log line of every agentd
process goes through, after exceptions are rendered to text and before the line is
written, so a key is masked wherever it sits: a field, a nested value, an exception.
It masks the shape, not known values, so a key agentd never saw is masked too.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_SECRET_WORD = r"(?:[_\-.]key|apikey|token|secret|password|passwd)"
"""The end of a name that labels a secret: ``api_key``, ``x-api-key``, ``access_token``,
``client_secret``, ``password`` (not ``tokens`` or ``max_tokens``: counts, not secrets)."""
_SECRET_SHAPES = re.compile(
    "|".join(
        (
            # OpenAI/Anthropic-style keys: sk-…, sk-proj-…, sk-ant-…
            r"(?P<sk>\bsk-)[A-Za-z0-9_\-]{6,}",
            # agentd's own API keys (agentd.daemon.api_keys): agentd- and 43 URL-safe characters
            r"(?P<agentd>\bagentd-)[A-Za-z0-9_\-]{40,}",
            # "Authorization: Bearer <token>"
            r"(?P<bearer>\bBearer\s+)[A-Za-z0-9._~+/=\-]+",
            # api_key=…, "token": "…", password: …
            rf"(?P<assign>\b[A-Za-z0-9_.\-]*{_SECRET_WORD}[\"']?\s*[=:]\s*)"
            r"(?:\"[^\"]*\"|'[^']*'|[^\s\"',;&)}\]]+)",
            # scheme://user:password@host
            r"(?P<userinfo>://[^/\s:@]*:)[^/\s@]+(?=@)",
        )
    ),
    re.IGNORECASE,
)
_SECRET_KEY = re.compile(
    rf"^(?:key|[A-Za-z0-9_.\-]*{_SECRET_WORD}|authorization|credentials?)$", re.IGNORECASE
)


def redact(text: str) -> str:
    """``text`` with every secret-shaped value replaced by ``***`` (its label kept)."""
    return _SECRET_SHAPES.sub(_keep_label, text)


def _keep_label(match: re.Match[str]) -> str:
    label = next(group for group in match.groups() if group is not None)
    return f"{label}{MASK}"


def redact_value(value: Any) -> Any:
    """``value`` with secrets masked, through nested dicts, lists and tuples."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            key: MASK if _is_secret_key(key) and value[key] else redact_value(value[key])
            for key in value
        }
    if isinstance(value, list | tuple):
        return type(value)(redact_value(item) for item in value)
    return value


def _is_secret_key(key: object) -> bool:
    return isinstance(key, str) and _SECRET_KEY.match(key) is not None


def redact_secrets(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: every field masked by :func:`redact_value`; a field named like
    a secret (``api_key``, ``*_token``, ``password``…) is masked whole. Values that are
    neither strings nor containers (numbers, None) pass as they are."""
    return redact_value(event)
