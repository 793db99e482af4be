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

The wipe writes the process's own memory through ``/proc/self/mem`` and only after
Python started; ``agentd up`` and ``agentd serve`` do better, since nothing must show the
keys at all, not for a moment: started with keys in their environment, they execute
themselves again without them and read them back from a descriptor
(:func:`without_keys_in_the_environment`), and ``agentd up`` hands them the same way to
the daemon and the workers it starts (:func:`hand_over`): no process of the stack ever
has a key in the environment it was started with. The descriptor is an anonymous file in
memory (``memfd``), open only until the one it is meant for has read it.
"""

from __future__ import annotations

import json
import os
import sys
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
HANDOFF_VARIABLE = "_AGENTD_HANDOFF_FD"
"""Names the descriptor a process reads its keys from (:func:`receive_keys`)."""


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


def without_keys_in_the_environment() -> None:
    """Make sure this process was started without keys in its environment.

    Started with some (from the shell, a unit's ``EnvironmentFile``), it executes itself
    again, same pid and arguments, with them left out and handed over on a descriptor;
    started that way, it puts them back into ``os.environ`` only, which ``Settings`` and
    :func:`take_provider_keys` read and ``/proc/<pid>/environ`` does not show. Call it
    first thing, before ``Settings`` are read.
    """
    if receive_keys():
        return
    keys = {name: value for name, value in os.environ.items() if is_key_name(name)}
    if not keys:
        return
    env = {name: value for name, value in os.environ.items() if name not in keys}
    fd = hand_over(keys)
    os.set_inheritable(fd, True)
    os.execve(sys.executable, sys.orig_argv, {**env, HANDOFF_VARIABLE: str(fd)})


def hand_over(keys: Mapping[str, str]) -> int:
    """A descriptor holding ``keys`` for a child to read (:func:`receive_keys`): pass it
    (``pass_fds``) with ``_AGENTD_HANDOFF_FD`` naming it, then close it."""
    fd = os.memfd_create("agentd-keys")
    os.write(fd, json.dumps(dict(keys)).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def receive_keys() -> bool:
    """Read the keys handed over on the descriptor ``_AGENTD_HANDOFF_FD`` names into
    ``os.environ`` (not the exec-time block) and close it; False if none was handed."""
    named = os.environ.pop(HANDOFF_VARIABLE, None)
    if named is None:
        return False
    fd = int(named)
    with os.fdopen(fd, "rb") as handed:
        keys = json.loads(handed.read())
    os.environ.update({str(name): str(value) for name, value in keys.items()})
    return True
