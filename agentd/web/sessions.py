"""Who may use the web view: one-time login tokens, the browser sessions they open, and
each session's CSRF token.

``agentctl web`` asks the daemon (over its private socket, so only this user can) for a
login token; the browser trades it once, within :data:`LOGIN_TOKEN_TTL_S`, for a session
cookie. A token seen in a terminal's scrollback or the browser's history is then worth
nothing. Sessions live in the daemon's memory only: a restart logs every browser out,
and ``agentctl web`` logs one in again.

Tokens and session ids are kept as SHA-256 digests, so nothing here compares a secret
byte by byte (the dict lookup of a digest says nothing about the secret's prefix).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

LOGIN_TOKEN_TTL_S = 120.0
"""How long a login link works: long enough to switch to the browser, short enough that
an old one found later opens nothing."""
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 32
"""Browsers logged in at once; a new login past it ends the oldest session."""
MAX_PENDING_TOKENS = 32


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    """The cookie's value."""
    csrf: str
    """What every state-changing request of this session must echo in a header."""
    expires_at: float

    def csrf_matches(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tokens: OrderedDict[str, float] = OrderedDict()
        """Digest of each unused login token → when it expires."""
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        """Digest of each session id → the session."""

    def issue_login_token(self) -> str:
        now = self._clock()
        self._forget_expired(now)
        token = secrets.token_urlsafe(32)
        self._tokens[_digest(token)] = now + LOGIN_TOKEN_TTL_S
        while len(self._tokens) > MAX_PENDING_TOKENS:
            self._tokens.popitem(last=False)
        return token

    def redeem(self, token: str) -> Session | None:
        """A new session for a valid login token, which is used up; None for a token that
        is unknown, used or expired."""
        now = self._clock()
        expires_at = self._tokens.pop(_digest(token), None)
        if expires_at is None or expires_at < now:
            return None
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + SESSION_TTL_S)
        self._sessions[_digest(session.id)] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session a cookie names, if any."""
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires_at < self._clock():
            del self._sessions[key]
            return None
        return session

    def _forget_expired(self, now: float) -> None:
        for key in [k for k, expires_at in self._tokens.items() if expires_at < now]:
            del self._tokens[key]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
