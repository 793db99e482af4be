"""The main agent's toolset, with schemas small enough to send on every request, and
bash in it only where it runs sandboxed or the host opted in to a bare one."""

from __future__ import annotations

import pytest

from shared import sandbox
from shared.agent.tools.registry import agent_shell, main_agent_tools
from shared.providers.tokens import tools_tokens
from tests.agent.tools.conftest import NO_BUBBLEWRAP, fake_no_bubblewrap


def test_the_main_agent_has_files_bash_and_recall() -> None:
    assert [tool.name for tool in main_agent_tools()] == [
        "read_file",
        "write_file",
        "edit_file",
        "bash",
        "recall_search",
        "messages_around",
    ]


def test_the_schemas_stay_small_enough_to_send_on_every_request() -> None:
    """423 tokens when they were written by hand; generated, they add only
    ``additionalProperties: false`` (no titles, defaults or null alternatives)."""
    assert tools_tokens([tool.schema for tool in main_agent_tools()]) <= 470


def test_without_bubblewrap_bash_is_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_no_bubblewrap(monkeypatch)
    shell = agent_shell(unsandboxed_allowed=False, network=False)
    assert (shell.offered, shell.sandboxed) == (False, False)
    assert shell.detail == f"bash not offered to the model: {NO_BUBBLEWRAP}"
    assert "AGENTD_UNSANDBOXED_BASH=1" in shell.fix
    tools = main_agent_tools(with_bash=shell.offered)
    assert "bash" not in [tool.name for tool in tools]


def test_without_bubblewrap_an_opted_in_host_gets_bash_unsandboxed_and_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_no_bubblewrap(monkeypatch)
    shell = agent_shell(unsandboxed_allowed=True, network=False)
    assert (shell.offered, shell.sandboxed) == (True, False)
    assert shell.detail.startswith("bash offered UNSANDBOXED (AGENTD_UNSANDBOXED_BASH=1)")
    assert "install bubblewrap" in shell.fix


@pytest.mark.skipif(not sandbox.available(), reason=f"no bubblewrap: {sandbox.reason()}")
def test_with_bubblewrap_bash_is_offered_sandboxed_whatever_the_opt_in() -> None:
    for allowed in (False, True):
        shell = agent_shell(unsandboxed_allowed=allowed, network=False)
        assert (shell.offered, shell.sandboxed) == (True, True)
        assert shell.detail.endswith("no network")
    assert agent_shell(unsandboxed_allowed=False, network=True).detail.endswith(
        "network ON (AGENTD_TOOL_NETWORK=1)"
    )
