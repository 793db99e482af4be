"""An answer whose client hangs up before the turn carries the step out: the step is
settled at once (nothing runs; the model is told), so the conversation takes messages
again without a restart. The hold is where a real one is: the first answer after a start
on a litellm model builds the provider (a ~5 s import) before the step is carried out."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

from shared.home import socket_path
from shared.protocol import request
from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from shared.settings import Settings
from tests.support.daemon import DaemonRunner
from tests.support.waiting import ceiling, wait_for

SCRIPTED = ScriptedProvider()


class SlowToBuild(ProviderFactory):
    """Every agent gets :data:`SCRIPTED`; once ``hold`` is set, getting it waits (as
    building a litellm provider does) until ``release``."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.hold = False
        self.holding = threading.Event()
        self.released = asyncio.Event()

    def get(self, model: str | None = None, context_window: int | None = None) -> Provider:
        return SCRIPTED

    async def get_off_loop(
        self, model: str | None = None, context_window: int | None = None
    ) -> Provider:
        if self.hold:
            self.holding.set()
            await self.released.wait()
        return SCRIPTED


def test_a_hang_up_before_the_step_is_carried_out_settles_it_and_runs_nothing(
    daemon: DaemonRunner,
) -> None:
    SCRIPTED.replies.clear()
    started = daemon.start(providers=SlowToBuild)
    factory = started.turns.providers
    assert isinstance(factory, SlowToBuild)
    daemon.result("agent.create", {"name": "ada"})
    daemon.result("agent.update", {"agent": "ada", "requires_approval": ["recall_search"]})
    SCRIPTED.enqueue(tool_reply(("recall_search", json.dumps({"query": "pnpm"}))))
    waiting = daemon.result("chat", {"agent": "ada", "text": "what about pnpm?"})
    (call,) = waiting["approvals"]
    asked = len(SCRIPTED.requests)

    factory.hold = True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(socket_path()))
        client.sendall(request("r1", "approval.approve", {"approval": call["id"]}))
        assert factory.holding.wait(ceiling(30)), "the answer never reached the turn"
    # The client is gone: the daemon cancels its request while the provider is built.

    def messages() -> list[dict[str, Any]]:
        return daemon.result("messages.list", {"agent": "ada", "order": "asc"})["messages"]

    wait_for(lambda: messages()[-1]["kind"] == "stop", "the step to be settled")
    factory.hold = False
    log = messages()
    assert [(m["role"], m["kind"]) for m in log][-3:] == [
        ("assistant", "message"),
        ("tool", "message"),
        ("assistant", "stop"),
    ]
    assert log[-2]["is_error"] and log[-2]["content"].startswith(
        "[not run: the turn was cancelled before this approved call started"
    )
    assert log[-1]["stop_reason"] == "cancelled"
    assert daemon.result("approval.list")["approvals"] == []
    assert len(SCRIPTED.requests) == asked, "nothing was carried on"

    SCRIPTED.enqueue(text_reply("Here again."))
    again = daemon.result("chat", {"agent": "ada", "text": "still there?"})
    assert again["text"] == "Here again."
    told = [m for m in SCRIPTED.requests[-1].messages if m.role == "tool"]
    assert [m.content for m in told] == [log[-2]["content"]]
