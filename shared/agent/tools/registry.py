"""The main agent's toolset in one place, so the loop and tests agree on what it is."""

from __future__ import annotations

from shared.agent.tools.base import Tool
from shared.agent.tools.bash import Bash
from shared.agent.tools.files import EditFile, ReadFile, WriteFile
from shared.agent.tools.recall import MessagesAround, RecallSearch


def main_agent_tools() -> list[Tool]:
    return [ReadFile(), WriteFile(), EditFile(), Bash(), RecallSearch(), MessagesAround()]
