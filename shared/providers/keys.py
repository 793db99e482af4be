"""Provider keys leave the process environment at start and live on only in the providers.

A process's environment is what every child it starts inherits, and what
``/proc/<pid>/environ`` shows to anything running as the same user; the model's bash is
such a child. So the daemon and each reflection worker call :func:`take_provider_keys`
once at start, before any tool can run: every key-shaped variable leaves ``os.environ``,
its value is wiped from the process's original environment block (which is what
``/proc/<pid>/environ`` reads, whatever ``os.environ`` says), and the values are kept in a
:class:`ProviderKeys` for the :class:`~shared.providers.factory.ProviderFactory`. litellm
would read ``OPENAI_API_KEY`` and friends from the environment by itself; it is handed
them explicitly instead (:meth:`ProviderKeys.litellm_credentials`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

KEY_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""A variable whose name holds one of these is taken (``OPENAI_API_KEY``, ``HF_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ``AGENTD_API_KEY`` …). Paths to credential files such as
``GOOGLE_APPLICATION_CREDENTIALS`` stay: they are not secrets, and libraries need them."""
AWS_ARGUMENTS = {
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
}
"""Bedrock and SageMaker take AWS credentials as litellm arguments, not as ``api_key``."""
PROC_SELF = Path("/proc/self")


@dataclass(frozen=True)
class ProviderKeys:
    """Key-shaped variables taken from the environment, by name (the repr shows no value)."""

    values: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"ProviderKeys(names={sorted(self.values)})"

    def litellm_credentials(self, needed: Iterable[str]) -> dict[str, str]:
        """litellm arguments for a model that reads the variables ``needed`` (litellm's
        ``validate_environment`` names them): ``api_key``, or AWS credentials."""
        credentials: dict[str, str] = {}
        for name in needed:
            if name in self.values:
                credentials.setdefault(AWS_ARGUMENTS.get(name, "api_key"), self.values[name])
        if "aws_access_key_id" in credentials and "AWS_SESSION_TOKEN" in self.values:
            credentials["aws_session_token"] = self.values["AWS_SESSION_TOKEN"]
        return credentials


def take_provider_keys() -> ProviderKeys:
    """Remove every key-shaped variable from this process's environment and return them.

    Call it once at start, after ``Settings`` were read (``AGENTD_API_KEY`` is one) and
    before anything starts a child process.
    """
    taken = {name: os.environ.pop(name) for name in list(os.environ) if is_key_name(name)}
    if taken:
        _wipe_initial_environment(taken)
    log.info("provider_keys_taken", names=sorted(taken))
    return ProviderKeys(taken)


def is_key_name(name: str) -> bool:
    """A variable that holds a secret, by its name (``OPENAI_API_KEY``, not ``OLLAMA_API_BASE``)."""
    upper = name.upper()
    return any(part in upper for part in KEY_NAME_PARTS)


def _wipe_initial_environment(taken: Mapping[str, str]) -> None:
    """Overwrite the taken values in the environment block the process started with.

    ``os.environ.pop`` unsets the variable, but the kernel still shows the original block
    in ``/proc/<pid>/environ``. Nothing points into it for a removed variable any more,
    so its bytes are zeroed through ``/proc/self/mem``. Where that is not allowed, the
    keys stay readable there by this user only, and the log says so.
    """
    try:
        fields = (PROC_SELF / "stat").read_text().rsplit(")", 1)[1].split()
        env_start = int(fields[47])  # field 50 of proc(5), counted after the command name
        block = (PROC_SELF / "environ").read_bytes()
        with open(PROC_SELF / "mem", "r+b", buffering=0) as memory:
            offset = 0
            for entry in block.split(b"\0"):
                name, _, value = entry.partition(b"=")
                if value and name.decode(errors="replace") in taken:
                    memory.seek(env_start + offset + len(name) + 1)
                    memory.write(b"\0" * len(value))
                offset += len(entry) + 1
    except (OSError, IndexError, ValueError) as exc:
        log.warning("provider_keys_not_wiped", error=str(exc), names=sorted(taken))
