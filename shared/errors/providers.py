"""Errors of a model call: the provider refused, failed, went quiet or answered nonsense.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


class ProviderError(AgentdError):
    code = "provider_error"


class ContextOverflowError(ProviderError):
    code = "context_overflow"


class ProviderAuthError(ProviderError):
    code = "provider_auth"


class ProviderConfigError(ProviderError):
    code = "provider_config"


class ProviderUnreachable(ProviderError):
    """No connection to the provider at all: nothing listens there, or the host does not
    resolve. Retried once (a server restarting), then reported with the URL to check."""

    code = "provider_unreachable"

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class ProviderHTTPError(ProviderError):
    code = "provider_http"

    def __init__(self, message: str, *, status_code: int | None, model: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.model = model


class ProviderTimeout(ProviderHTTPError):
    """The provider sent nothing for ``AGENTD_PROVIDER_TIMEOUT_S``: no answer, no first
    token, or no next piece of a stream. Not retried: a hung provider is reported when the
    timeout says so, not after as long again for each attempt."""

    code = "provider_timeout"

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message, status_code=None, model=model)


class ProviderMisbehaved(ProviderError):
    code = "provider_misbehaved"
