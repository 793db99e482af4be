"""The main agent's toolset in one place, so the loop and tests agree on what it is.

Whether ``bash`` is in it depends on the host: where bubblewrap works it is, sandboxed;
where it does not, only if the host opted in to an unconfined shell
(``AGENTD_UNSANDBOXED_BASH=1``). A tool the model is never offered cannot be talked into
running, so the refusal is made here, in the list the model sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from shared import sandbox
from shared.agent.tools.base import Tool
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile, ReadFile, WriteFile
from shared.agent.tools.recall import MessagesAround, RecallSearch
from shared.errors import UnknownTool

log = structlog.get_logger(__name__)

INSTALL_BUBBLEWRAP = "install bubblewrap (`apt-get install bubblewrap`)"


@dataclass(frozen=True)
class AgentShell:
    """Whether the main agent gets ``bash`` on this host and how it runs, in words the
    daemon's start-up log and ``agentd doctor`` both use."""

    offered: bool
    sandboxed: bool
    detail: str
    fix: str = ""

    def log(self) -> None:
        """Say it at start-up: loudly when bash is bare or missing."""
        if self.sandboxed:
            log.info("agent_bash_sandboxed", detail=self.detail)
        elif self.offered:
            log.warning("agent_bash_unsandboxed", detail=self.detail, fix=self.fix)
        else:
            log.warning("agent_bash_not_offered", detail=self.detail, fix=self.fix)


def agent_shell(*, unsandboxed_allowed: bool, network: bool) -> AgentShell:
    """The main agent's ``bash`` on this host; ``unsandboxed_allowed`` is
    ``AGENTD_UNSANDBOXED_BASH``, ``network`` is ``AGENTD_TOOL_NETWORK``."""
    if sandbox.available():
        reach = "network ON (AGENTD_TOOL_NETWORK=1)" if network else "no network"
        return AgentShell(
            offered=True,
            sandboxed=True,
            detail=(
                "bash offered in bubblewrap: only its workspace and memory checkout (.git "
                f"read-only), a read-only system, its own /proc and /tmp; {reach}"
            ),
        )
    if unsandboxed_allowed:
        return AgentShell(
            offered=True,
            sandboxed=False,
            detail=(
                f"bash offered UNSANDBOXED (AGENTD_UNSANDBOXED_BASH=1): the model's commands "
                f"can read and write whatever this user can; {sandbox.reason()}"
            ),
            fix=f"{INSTALL_BUBBLEWRAP} to confine it, then unset AGENTD_UNSANDBOXED_BASH",
        )
    return AgentShell(
        offered=False,
        sandboxed=False,
        detail=f"bash not offered to the model: {sandbox.reason()}",
        fix=(
            f"{INSTALL_BUBBLEWRAP}, or set AGENTD_UNSANDBOXED_BASH=1 to offer it unconfined "
            "(it then sees whatever this user can)"
        ),
    )


def main_agent_tools(*, with_bash: bool = True) -> list[Tool]:
    """The toolset; the daemon passes ``agent_shell(...).offered`` as ``with_bash``, while
    callers that only measure the schemas keep the default, the largest toolset."""
    shell: list[Tool] = [Bash()] if with_bash else []
    return [ReadFile(), WriteFile(), EditFile(), *shell, RecallSearch(), MessagesAround()]


def tools_named(names: list[str]) -> list[str]:
    """``names`` checked to be tools of the main agent (``bash`` too, where the host does
    not offer it: the setting outlives a host), each once, sorted; raises
    :class:`UnknownTool` naming the tools there are."""
    known = sorted(tool.name for tool in main_agent_tools())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UnknownTool(
            f"no tool named {', '.join(map(repr, unknown))}; an agent's tools are "
            f"{', '.join(known)}"
        )
    return sorted(set(names))
