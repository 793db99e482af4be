"""``agentd doctor``'s line about the OpenAI-compatible endpoint: where it is and whether
any key opens it.

No key is not a failure (the endpoint is simply closed to everyone), so that line is a
✓ that says how to make one; a key file that cannot be read is a ✗: every key is refused
until it is moved aside.
"""

from __future__ import annotations

from agentd.daemon.api_keys import ApiKeyFile
from agentd.daemon.effective_config import EffectiveConfig
from agentd.stack.doctor_findings import Finding
from agentd.web.address import WebAddress
from shared.errors import CorruptStateFile, WebAddressError
from shared.settings import Settings
from shared.store.atomic import read_model

WHAT = "openai endpoint"
_OFF = "off, as the web view is (agentd up --web, or AGENTD_WEB=127.0.0.1:8765)"


def endpoint_of_the_daemon(config: EffectiveConfig) -> Finding:
    if config.api_keys_damaged is not None:
        return _damaged(config.api_keys_damaged)
    if config.api_endpoint is None:
        return Finding(True, WHAT, _OFF)
    return Finding(True, WHAT, f"{config.api_endpoint}; {_keys(config.api_keys)}")


def endpoint_of_this_shell(settings: Settings) -> Finding:
    """The endpoint a daemon started from this shell would serve, and the keys on disk."""
    try:
        stored = read_model(settings.layout.api_keys, ApiKeyFile) or ApiKeyFile()
    except CorruptStateFile as exc:
        return _damaged(exc.message)
    keys = _keys(sum(1 for key in stored.keys if key.revoked_at is None))
    if settings.web is None:
        return Finding(True, WHAT, f"{_OFF}; {keys}")
    try:
        address = WebAddress.parse(settings.web)
    except WebAddressError as exc:
        return Finding(False, WHAT, str(exc), "set AGENTD_WEB to host:port")
    where = f"http://{address.netloc(address.port)}/v1"
    return Finding(True, WHAT, f"{where} once agentd runs; {keys}")


def _keys(count: int) -> str:
    if count == 0:
        return "no API key yet, so every request is refused (agentctl api-key create NAME)"
    return f"{count} API key{'s' if count > 1 else ''} in use"


def _damaged(why: str) -> Finding:
    return Finding(
        False,
        WHAT,
        f"the API key file cannot be read, so every key is refused: {why}",
        "move the file aside and make the keys again with `agentctl api-key create NAME`",
    )
