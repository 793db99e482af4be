"""A paused agent: automatic reflection waits for the user to fix the model configuration.

Most failures of a reflection pass by themselves (a 429, a 5xx, a provider's one-off 400,
a server that is restarting) and are retried after a backoff. Three never do, because
every later call would fail the same way until the user changes something: the provider
does not serve the model or endpoint (``provider_config``), the key is missing or refused
(``provider_auth``), or the reflector's window cannot hold even its own prompt
(``prompt_floor``). Retrying those only repeats the failure, so the agent's automatic
reflection is *paused* instead, and the user is told where they look: ``agentctl
status``, the web view, and the agent's next chat.

A pause remembers the model setup it failed with (:attr:`Pause.setup`, a digest of the
reflector's model string, api base, window and credentials) and lifts by itself when a
worker's setup differs: fixing the key or the model and restarting agentd is enough. A
manual run (``agentctl reflect``) bypasses it, and any run that ends without a
configuration error lifts it.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel

PAUSING_ERRORS = frozenset({"provider_config", "provider_auth", "prompt_floor"})
"""The error codes a user must fix; any other failure is retried after a backoff."""


class Pause(BaseModel):
    """Why an agent's automatic reflection is paused (kept in ``reflections/backoff.json``)."""

    reason: str
    """The error code that paused it: one of :data:`PAUSING_ERRORS`."""
    message: str
    """What the failed run said: names the model and what to set."""
    setup: str
    """The digest of the model setup it failed with (:func:`setup_digest`)."""
    since: datetime


def setup_digest(parts: Iterable[str | int | None]) -> str:
    """A short digest of a model setup (model, api base, window, credentials): equal for
    the same setup, different when any part changed. Credentials enter only hashed, and
    only 16 hex digits of the hash are kept."""
    joined = "\0".join("" if part is None else str(part) for part in parts)
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def resume_command(agent_name: str) -> str:
    """The command that retries now (and lifts the pause unless it fails the same way)."""
    return f"agentctl reflect --agent {shlex.quote(agent_name)}"


def describe(pause: Pause, agent_name: str) -> str:
    """One paragraph for a person: what is paused, why, and how it resumes."""
    message = pause.message.rstrip(".; ")
    return (
        f"automatic reflection of {agent_name} is paused ({pause.reason}): {message}. "
        "It resumes by itself once the reflector's model, api base, window or key changes "
        f"(restart agentd after changing them); `{resume_command(agent_name)}` retries now."
    )


def view(pause: Pause | None, agent_name: str) -> dict[str, str] | None:
    """The pause as ``agentctl status --json`` and the web view show it (None: not paused)."""
    if pause is None:
        return None
    return {
        "reason": pause.reason,
        "message": pause.message,
        "since": pause.since.isoformat(),
        "resume": resume_command(agent_name),
        "text": describe(pause, agent_name),
    }
