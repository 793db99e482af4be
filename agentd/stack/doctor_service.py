"""``agentd doctor``'s checks of the running service: the daemon, the Redis it uses, its
model's credentials and whether its API answers, and the OpenAI-compatible endpoint it
serves (:mod:`.doctor_api`).

The settings that count are the daemon's (they come from the environment it was started
in), so while it runs doctor asks it for them (``config.show``, and ``status`` for Redis
as the daemon sees it) instead of reading its own environment. Only when no daemon runs
does doctor check the settings a start from this shell would use.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agentd.daemon.effective_config import EffectiveConfig
from agentd.daemon.progress import progress
from agentd.stack.doctor_api import endpoint_of_the_daemon, endpoint_of_this_shell
from agentd.stack.doctor_findings import Finding
from agentd.stack.model_api_probe import KNOWN_BASES, probe
from shared import protocol
from shared.errors import NoAnswer, NotRunning
from shared.providers.credentials import KEY_NAME_PARTS
from shared.providers.loopback import is_loopback
from shared.providers.mock import MOCK_MODEL
from shared.settings import Settings

DAEMON_TIMEOUT_S = 10.0
"""How long doctor waits for the daemon's answers (``status`` reads every agent's files)."""


def ask(path: Path, op: str) -> dict[str, Any]:
    """``op``'s result from the daemon listening on ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DAEMON_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise NotRunning(str(exc)) from exc
        try:
            sock.sendall(protocol.request("doctor", op))
            with sock.makefile("rb") as lines:
                for raw in lines:
                    message = json.loads(raw)
                    if "ok" not in message:
                        continue
                    if message["ok"]:
                        return message["result"]
                    error = message.get("error") or {}
                    raise NoAnswer(f"it answered {op} with {error.get('code')}")
        except (OSError, ValueError) as exc:
            raise NoAnswer(f"its answer to {op} broke off ({exc})") from exc
    raise NoAnswer(f"it closed the connection without answering {op}")


@dataclass(frozen=True)
class ModelSetup:
    """What a model's checks need, from the daemon or from this shell's settings."""

    model: str
    api_base: str | None
    present: frozenset[str]
    """Variables the process that calls the model has (key values are never needed)."""
    api_key_set: bool
    block_remote: bool
    daemons: bool
    """Whether this is the running daemon's setup (the fix then includes a restart)."""

    @classmethod
    def of_this_shell(cls, settings: Settings) -> ModelSetup:
        return cls(
            settings.model,
            settings.api_base,
            frozenset(os.environ),
            settings.api_key is not None,
            settings.block_remote_models,
            daemons=False,
        )

    @classmethod
    def of_the_daemon(cls, config: EffectiveConfig) -> ModelSetup:
        """The daemon names the keys it took; a variable that is no key (a project id)
        it never took, and is checked here as this shell has it."""
        here = {name for name in os.environ if not _key_shaped(name)}
        keys = set(os.environ) if config.provider_keys is None else set(config.provider_keys)
        return cls(
            config.model,
            config.api_base,
            frozenset(here | keys),
            config.api_key_set,
            config.block_remote_models,
            daemons=True,
        )

    def where(self) -> str:
        return " where agentd starts, then restart it" if self.daemons else ""


def service_findings(settings: Settings, local_redis: Callable[[], Finding]) -> Iterator[Finding]:
    """The daemon's finding, then Redis, the model and its API as the daemon has them;
    ``local_redis`` (Redis from this shell) stands in while no daemon answers."""
    path = settings.layout.socket_path
    try:
        config = EffectiveConfig.model_validate(ask(path, "config.show"))
        redis = ask(path, "status")["redis"]
    except NotRunning:
        yield Finding(False, "daemon", "not running (start it with agentd up)")
        yield local_redis()
        yield from model_findings(ModelSetup.of_this_shell(settings))
        yield endpoint_of_this_shell(settings)
        return
    except NoAnswer as exc:
        fix = "restart it: `agentctl shutdown`, then `agentd up`"
        yield Finding(False, "daemon", f"on {path}, but {exc}", fix)
        yield local_redis()
        return
    yield Finding(
        True, "daemon", f"answering on {path} (pid {config.pid}, agentd {config.version})"
    )
    yield redis_of_the_daemon(config, redis)
    yield from model_findings(ModelSetup.of_the_daemon(config))
    yield endpoint_of_the_daemon(config)


def redis_of_the_daemon(config: EffectiveConfig, redis: dict[str, Any]) -> Finding:
    where = "embedded Valkey" if config.redis_embedded else config.redis_url
    if redis.get("reachable"):
        return Finding(True, "redis", f"{where}, reachable from the daemon")
    state = redis.get("state")
    if state == "restarting":
        return Finding(False, "redis", f"{where} is down; agentd up is restarting it")
    if state == "not_started":
        return Finding(
            False,
            "redis",
            f"{where} is not running: the daemon was started alone (agentd serve)",
            "stop it (`agentctl shutdown`) and start the whole stack with `agentd up`",
        )
    return Finding(
        False,
        "redis",
        f"the daemon cannot reach {where}",
        "start that Redis, or correct AGENTD_REDIS_URL where agentd starts and restart it",
    )


def model_findings(setup: ModelSetup) -> Iterator[Finding]:
    """The model's credentials, then its API; one line for the offline mock."""
    if setup.model == MOCK_MODEL:
        yield Finding(True, "model", "mock (offline, deterministic)")
        return
    litellm = _import_litellm()
    yield check_credentials(litellm, setup)
    yield check_api_base(litellm, setup)


def _import_litellm() -> ModuleType:
    """litellm, offline (no cost map download); its import takes seconds, so it says so."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    with progress("model", "importing litellm"):
        import litellm
    litellm.suppress_debug_info = True
    return litellm


def check_credentials(litellm: ModuleType, setup: ModelSetup) -> Finding:
    try:
        needed = _needed(litellm, setup)
    except Exception as exc:  # an unknown provider prefix, say
        return Finding(
            False,
            "model",
            f"{setup.model}: {exc}",
            "use a litellm model string such as openai/gpt-4o or ollama/llama3.1",
        )
    has_base = bool(setup.api_base or _default_base(litellm, setup.model))
    missing = [
        name
        for name in needed
        if name not in setup.present and not (has_base and name.endswith("_API_BASE"))
    ]
    whose = "the daemon's; " if setup.daemons else ""
    if missing and not setup.api_key_set:
        lacks = "the daemon has no" if setup.daemons else "missing"
        return Finding(
            False,
            "model",
            f"{setup.model}: {lacks} {', '.join(missing)}",
            f"export {missing[0]}=… (or set AGENTD_API_KEY){setup.where()}",
        )
    return Finding(True, "model", f"{setup.model} ({whose}credentials present)")


def _needed(litellm: ModuleType, setup: ModelSetup) -> list[str]:
    """The variables litellm wants for the model, whatever this shell happens to hold:
    it is asked with every key-shaped variable out of the environment."""
    hidden = {name: os.environ.pop(name) for name in list(os.environ) if _key_shaped(name)}
    try:
        report = litellm.validate_environment(model=setup.model, api_base=setup.api_base)
    finally:
        os.environ.update(hidden)
    return list(report.get("missing_keys") or [])


def _key_shaped(name: str) -> bool:
    return any(part in name.upper() for part in KEY_NAME_PARTS)


def check_api_base(litellm: ModuleType, setup: ModelSetup) -> Finding:
    url = setup.api_base or _default_base(litellm, setup.model)
    if url is None:
        return Finding(True, "api base", "the provider's default endpoint (not probed)")
    if setup.block_remote and not is_loopback(url):
        return Finding(
            False,
            "api base",
            f"{url}: remote model requests are refused (AGENTD_BLOCK_REMOTE_MODELS=1)",
            f"unset AGENTD_BLOCK_REMOTE_MODELS (it is for the test suite){setup.where()}",
        )
    with progress("api base", f"asking {url}"):
        answer = probe(url)
    if answer.ok:
        return Finding(True, "api base", f"{url} answers ({answer.detail})")
    fix = (
        f"start the server there, or set AGENTD_API_BASE to where it runs{setup.where()}"
        if setup.api_base or is_loopback(url)
        else "check this machine's network connection (and proxy settings)"
    )
    return Finding(False, "api base", f"{url} {answer.detail}", fix)


def _default_base(litellm: ModuleType, model: str) -> str | None:
    try:
        _model, provider, _key, base = litellm.get_llm_provider(model)
    except Exception:  # an unknown provider: the credentials finding names it
        return None
    return base or KNOWN_BASES.get(provider)
