"""No process of the stack is started with a provider key, and the keys still reach the model.

``/proc/<pid>/environ`` is the environment a process was *started* with, readable by
anything running as the same user (a filter a model planted in a repo the harness's git
entered did exactly that to ``agentd up``). Removing a key from ``os.environ`` later does
not change it. So ``agentd up`` and ``agentd serve`` execute themselves again without
their keys, and the supervisor hands the daemon and the workers theirs on a descriptor.
Here the whole stack runs with canary keys in its environment and an API key in
``agentd.toml``; every process of its tree (the supervisor, Valkey, the daemon, the recall
process, the worker and its pool child) is read, and a chat and a reflection go through
the local OpenAI-compatible server, which sees the right ``Authorization``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.home import socket_path
from shared.providers.credentials import is_key_name
from tests.faults.stack import cmdline, descendants
from tests.support.openai_server import FakeOpenAIServer
from tests.support.processes import AgentdProcess, final_answer
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests

pytestmark = pytest.mark.slow

KEYS = {
    "OPENAI_API_KEY": "sk-canary-openai-3e1f",
    "ANTHROPIC_API_KEY": "sk-canary-anthropic-8a2c",
    "HF_TOKEN": "hf-canary-token-51d0",
    "AGENTD_API_KEY": "sk-canary-agentd-77b4",
}
"""``AGENTD_API_KEY`` is the one the model is called with (it wins over ``agentd.toml``)."""
TOML_KEY = "sk-canary-toml-c90e"
MODEL = {"AGENTD_MODEL": "openai/test-model", "AGENTD_CONTEXT_WINDOW": "32000"}


def ask(home: Path, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = final_answer(socket_path(home), op, params, timeout_s=60.0)
    assert answer is not None and answer["ok"], answer
    return answer["result"]


def started_with(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with, as anyone of this user reads it."""
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (entry.decode(errors="replace").partition("=") for entry in entries if entry)
    return {name: value for name, _, value in pairs}


def leaks(pids: list[int]) -> list[str]:
    """Every process of ``pids`` that shows a key: a canary value, or a key-shaped name
    (the old in-place wipe left ``OPENAI_API_KEY=`` with its value zeroed)."""
    canaries = [*KEYS.values(), TOML_KEY]
    found = []
    for pid in pids:
        try:
            environ = started_with(pid)
        except OSError:  # gone meanwhile
            continue
        shown = [name for name in environ if is_key_name(name)]
        shown += [c for c in canaries if any(c in value for value in environ.values())]
        if shown:
            found.append(f"{pid} ({cmdline(pid)[:60]}): {shown}")
    return found


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def stack(agentd_home: Path, server: FakeOpenAIServer) -> Iterator[subprocess.Popen[bytes]]:
    (agentd_home / "agentd.toml").write_text(f'api_key = "{TOML_KEY}"\n')
    env = {
        **os.environ,
        **KEYS,
        **MODEL,
        "AGENTD_API_BASE": server.url,
        "AGENTD_WORKERS": "1",
        "AGENTD_REFLECTION_WAIT_S": "30",
    }
    with open(agentd_home / "up.out", "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "up"], env=env, stdout=out, stderr=out
        )

    def ready() -> bool:
        assert up.poll() is None, (agentd_home / "up.out").read_text()
        try:
            return len(ask(agentd_home, "status")["redis"]["workers"]) == 1
        except (OSError, AssertionError, ValueError):
            return False

    try:
        wait_for(ready, "agentd up with its worker", timeout_s=90)
        yield up
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(ceiling(60))


def test_no_process_of_agentd_up_is_started_with_a_key_and_the_keys_still_work(
    stack: subprocess.Popen[bytes], agentd_home: Path, server: FakeOpenAIServer
) -> None:
    tree = [stack.pid, *descendants(stack.pid)]
    names = " | ".join(cmdline(pid) for pid in tree)
    for part in ("agentd.cli up", "valkey", "agentd.cli serve", "agentd.recall.process", "celery"):
        assert part in names, f"{part} is not in the stack: {names}"
    assert len([pid for pid in tree if "celery" in cmdline(pid)]) == 2, "a worker and its child"
    assert leaks(tree) == []

    ask(agentd_home, "chat", {"text": "I prefer tabs."})
    assert server.authorizations == [f"Bearer {KEYS['AGENTD_API_KEY']}"]

    assert ask(agentd_home, "reflection.request", {})["queued"] is True
    wait_for(lambda: len(server.requests) > 1, "the reflection's model call", timeout_s=60)
    assert "reflection" in str(server.requests[1]["messages"][0]["content"])
    assert server.authorizations[1] == f"Bearer {KEYS['AGENTD_API_KEY']}"
    assert leaks([stack.pid, *descendants(stack.pid)]) == []


def test_agentd_serve_and_agentd_worker_started_alone_hand_on_their_keys_too(
    agentd_home: Path, server: FakeOpenAIServer, redis_server: RedisForTests
) -> None:
    """The systemd units' way and a second host's: ``agentd serve`` and ``agentd worker``,
    each started with keys from an ``EnvironmentFile``. Neither the daemon (nor its recall
    process) nor the Celery process the worker becomes holds one in its environment, and
    the chat's and the reflection's model calls still carry the key."""
    env = {**os.environ, **KEYS, **MODEL, "AGENTD_API_BASE": server.url}
    output = agentd_home.parent / f"{agentd_home.name}-worker.out"
    with open(output, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "worker", "--concurrency", "1"],
            env=env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    daemon = AgentdProcess(**KEYS, **MODEL, AGENTD_API_BASE=server.url).start()
    try:
        assert daemon.proc is not None
        serving = [daemon.proc.pid, *descendants(daemon.proc.pid)]
        assert any("agentd.recall.process" in cmdline(pid) for pid in serving), serving
        assert leaks(serving) == []
        wait_for(lambda: len(ask(agentd_home, "status")["redis"]["workers"]) == 1, "the worker")
        tree = [worker.pid, *descendants(worker.pid)]
        assert "celery" in cmdline(worker.pid)  # it became the worker, in place
        assert leaks(tree) == []
        ask(agentd_home, "chat", {"text": "I prefer tabs."})
        assert server.authorizations == [f"Bearer {KEYS['AGENTD_API_KEY']}"]
        asked = ask(agentd_home, "reflection.request", {"wait_s": ceiling(50)})
        log = output.read_text(errors="replace")
        assert asked["outcome"] is not None, f"no outcome of the reflection; the worker:\n{log}"
        assert len(server.requests) > 1, f"no model call in {asked['outcome']}; worker:\n{log}"
        assert server.authorizations[1] == f"Bearer {KEYS['AGENTD_API_KEY']}"
        assert leaks([worker.pid, *descendants(worker.pid)]) == []
    finally:
        daemon.stop()
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(ceiling(60))
