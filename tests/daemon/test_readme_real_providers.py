"""The README's "Real providers" line for an OpenAI-compatible server, run as written
(its address swapped for the local test server's): a new user's first chat answers. And
without a key the refusal says a dummy one does for a server of one's own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion
from tests.support.processes import AgentdProcess, run_agentctl

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
ASSIGNMENT = re.compile(r"^([A-Z_]+)=(\S+)$")


def readme_line() -> dict[str, str]:
    """The variables the README's OpenAI-compatible line sets, in its order."""
    (line,) = [
        line for line in README.read_text().splitlines() if "any OpenAI-compatible server" in line
    ]
    command = line.split("make up", 1)[0].split()
    assignments = [ASSIGNMENT.match(word) for word in command]
    assert all(assignments), f"not all of {command} are NAME=VALUE"
    return {m.group(1): m.group(2) for m in assignments if m is not None}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def chat_with(env: dict[str, str], server: FakeOpenAIServer) -> tuple[int, str, str]:
    env = {**env, "AGENTD_API_BASE": server.url}
    agentd = AgentdProcess(**env).start()
    try:
        result = run_agentctl("chat", "-p", "hello", env=agentd.env)
    finally:
        agentd.stop()
    return result.returncode, result.stdout, result.stderr


def test_the_readme_line_for_an_openai_compatible_server_works_as_written(
    server: FakeOpenAIServer,
) -> None:
    env = readme_line()
    assert env["AGENTD_API_BASE"].startswith("http://localhost:")
    server.enqueue(body=chat_completion("Hello from your own server."))
    status, out, err = chat_with(env, server)
    assert (status, out) == (0, "Hello from your own server.\n"), err


@pytest.mark.sdk  # imports litellm
@pytest.mark.usefixtures("no_provider_keys")
def test_without_a_key_the_refusal_says_a_dummy_one_does_for_ones_own_server(
    server: FakeOpenAIServer, daemon: DaemonRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon in this worker (litellm is loaded there already), its settings read from
    the README line's variables as ``agentd serve`` reads them, the key left out."""
    env = {k: v for k, v in readme_line().items() if k != "AGENTD_API_KEY"}
    for name, value in {**env, "AGENTD_API_BASE": server.url}.items():
        monkeypatch.setenv(name, value)
    daemon.start()

    result = run_agentctl("chat", "-p", "hello")
    status, err = result.returncode, result.stderr
    assert status == 1
    assert "\nprovider_auth: " in err
    assert f"a server of your own at {server.url} that checks no key" in err
    assert "AGENTD_API_KEY=dummy" in err
    assert server.requests == []  # refused before any request
