"""Provider keys: out of the environment (and its /proc view) at start, into the providers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from shared.errors import ProviderAuthError
from shared.models.messages import Message
from shared.providers.base import ModelRequest
from shared.providers.credentials import ProviderKeys, take_provider_keys
from shared.providers.factory import ProviderFactory
from shared.settings import Settings
from tests.support.openai_server import FakeOpenAIServer
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

CANARY = "sk-canary-keys-7d2c"

TAKE_THEN_LOOK = """
import json, os, subprocess
from shared.providers.credentials import take_provider_keys
keys = take_provider_keys()
print(json.dumps({
    "taken": sorted(keys.values),
    "repr": repr(keys),
    "environ": sorted(os.environ),
    "proc_environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
    "child_env": subprocess.run(["env"], capture_output=True, text=True).stdout,
}))
"""


def test_taking_the_keys_empties_the_environment_its_proc_view_and_every_later_child() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "OPENAI_API_KEY": CANARY,
        "AGENTD_API_KEY": CANARY + "-agentd",
        "HF_TOKEN": CANARY + "-hf",
        "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcp.json",
        "LANG": "C.UTF-8",
    }
    look = subprocess.run(
        [sys.executable, "-c", TAKE_THEN_LOOK],
        env=env,
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
        timeout=ceiling(60),
        check=True,
    )
    seen = json.loads(look.stdout.splitlines()[-1])
    assert seen["taken"] == ["AGENTD_API_KEY", "HF_TOKEN", "OPENAI_API_KEY"]
    assert seen["repr"] == "ProviderKeys(names=['AGENTD_API_KEY', 'HF_TOKEN', 'OPENAI_API_KEY'])"
    assert {"PATH", "LANG", "GOOGLE_APPLICATION_CREDENTIALS"} <= set(seen["environ"])
    assert not {"OPENAI_API_KEY", "AGENTD_API_KEY", "HF_TOKEN"} & set(seen["environ"])
    assert "canary" not in seen["proc_environ"]
    assert "canary" not in seen["child_env"]


REEXEC_THEN_LOOK = """
import json, os, sys
from shared.providers.credentials import without_keys_in_the_environment
without_keys_in_the_environment()
print(json.dumps({
    "argv": sys.argv[1:],
    "pid": os.getpid(),
    "keys": {name: os.environ.get(name) for name in ("OPENAI_API_KEY", "AGENTD_API_KEY")},
    "proc_environ": open("/proc/self/environ", "rb").read().decode(errors="replace"),
    "open_fds": sorted(os.listdir("/proc/self/fd")),
}))
"""


def test_a_process_started_with_keys_runs_again_without_them_and_reads_them_back() -> None:
    """``agentd up`` and ``agentd serve``: same pid and arguments, the keys in ``os.environ``
    only, and nothing of them in the environment the kernel shows for the process."""
    env = {"PATH": os.environ["PATH"], "OPENAI_API_KEY": CANARY, "AGENTD_API_KEY": CANARY + "-a"}
    look = subprocess.Popen(
        [sys.executable, "-c", REEXEC_THEN_LOOK, "up", "--web"],
        env=env,
        cwd=os.getcwd(),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = look.communicate(timeout=ceiling(60))
    seen = json.loads(out.splitlines()[-1])
    assert seen["pid"] == look.pid and seen["argv"] == ["up", "--web"]
    assert seen["keys"] == {"OPENAI_API_KEY": CANARY, "AGENTD_API_KEY": CANARY + "-a"}
    assert "canary" not in seen["proc_environ"] and "API_KEY" not in seen["proc_environ"]
    assert seen["open_fds"] == ["0", "1", "2", "3"], "the descriptor was closed once read"


@pytest.mark.sdk  # imports litellm
def test_a_provider_gets_the_taken_key_explicitly_and_its_call_succeeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if "KEY" in name.upper() or "TOKEN" in name.upper():
            monkeypatch.delenv(name)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    keys = take_provider_keys()
    assert "OPENAI_API_KEY" not in os.environ
    request = ModelRequest(
        system="s",
        messages=[Message.of(id="m", agent_id="a", conversation_id="c", role="user", content="hi")],
    )
    with FakeOpenAIServer() as server:
        settings = Settings(model="openai/gpt-4o", api_base=server.url, provider_attempts=1)
        with pytest.raises(ProviderAuthError, match="set OPENAI_API_KEY"):
            asyncio.run(ProviderFactory(settings).get().complete(request))
        reply = asyncio.run(ProviderFactory(settings, keys).get().complete(request))
    assert reply.text


def test_aws_credentials_go_to_litellm_as_aws_arguments() -> None:
    keys = ProviderKeys(
        {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "t"}
    )
    assert keys.litellm_credentials(["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]) == {
        "aws_access_key_id": "id",
        "aws_secret_access_key": "secret",
        "aws_session_token": "t",
    }
    assert ProviderKeys({"TOGETHERAI_API_KEY": "k"}).litellm_credentials(
        ["TOGETHERAI_API_KEY"]
    ) == {"api_key": "k"}
