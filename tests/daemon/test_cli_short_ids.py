"""Short message ids (the last 8 characters agentctl shows) name one message, or none."""

from __future__ import annotations

from pathlib import Path

from shared.ids import new_id
from shared.models.messages import Message
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner


def test_a_short_id_two_messages_end_with_is_ambiguous_and_a_longer_one_is_not(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    daemon.result("chat", {"text": "hello"})
    agent = daemon.result("agent.show")
    daemon.stop()
    conversation = Conversation.open(
        Layout(agentd_home), agent["id"], agent["default_conversation_id"]
    )
    twins = [
        Message.of(
            id=new_id("msg")[:-9] + f"{n}TWINSUFX",
            agent_id=agent["id"],
            conversation_id=conversation.id,
            role="user",
            content=f"twin {n}",
        )
        for n in (1, 2)
    ]
    conversation.append(twins)  # indexed for search when the daemon starts again

    again = DaemonRunner(agentd_home)
    again.start()
    try:
        for op, params in (
            ("messages.around", {"message_id": "TWINSUFX"}),
            ("messages.list", {"after": "TWINSUFX"}),
        ):
            error = again.call(op, params)[-1]["error"]
            assert error["code"] == "ambiguous_message", op
        longer = twins[1].id[-9:]
        around = again.result("messages.around", {"message_id": longer, "before": 0, "after": 0})
        assert [m["content"] for m in around["messages"]] == ["twin 2"]
        after = again.result("messages.list", {"after": twins[0].id[-9:], "order": "asc"})
        assert [m["content"] for m in after["messages"]] == ["twin 2"]
        missing = again.call("messages.around", {"message_id": "NOSUCHID"})[-1]["error"]
        assert missing["code"] == "unknown_message"
    finally:
        again.stop()
