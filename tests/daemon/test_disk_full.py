"""A full disk fails the turn with ``disk_full`` and loses nothing that was acknowledged.

The daemon runs on a tiny tmpfs as its ``AGENTD_HOME`` (:mod:`tests.support.small_disk`).
Filling it leaves the slack in the last page of ``messages.jsonl`` writable, so a long
message is written in part and then refused: exactly the torn append a real full disk
produces.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from shared.models.messages import Message
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.scripted import ScriptedProvider, text_reply
from tests.support.daemon import DaemonRunner
from tests.support.small_disk import SmallDisk


def _logged_messages(home: Path, conversation_id: str) -> list[Message]:
    """Every line of the conversation's log, each of which must be one whole message."""
    [log_file] = home.glob(f"agents/*/conversations/{conversation_id}/messages.jsonl")
    data = log_file.read_bytes()
    assert data.endswith(b"\n"), "the log ends in a torn line"
    return [Message.parse_line(line) for line in data.splitlines()]


def _turn_error(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The error a chat ended with: an error reply, or a turn that stopped on an error."""
    final = lines[-1]
    if not final["ok"]:
        return final["error"]
    assert final["result"]["stop_reason"] == "error", final
    return final["result"]["error"]


def _needed_bytes(error: dict[str, Any]) -> int:
    found = re.search(r"needs ([\d,]+) bytes", error["message"])
    assert found, error["message"]
    return int(found.group(1).replace(",", ""))


def test_a_message_refused_by_a_full_disk_leaves_no_fragment_for_the_next_one(
    small_disk: SmallDisk, daemon_on_small_disk: DaemonRunner
) -> None:
    daemon = daemon_on_small_disk
    daemon.start()
    first = daemon.result("chat", {"text": "first, acknowledged"})
    conversation = first["conversation_id"]
    lost = "a long message the full disk refuses " * 500

    small_disk.fill()
    refused = daemon.call("chat", {"text": lost, "conversation": conversation})
    error = _turn_error(refused)
    small_disk.free()
    after = daemon.result("chat", {"text": "third, acknowledged", "conversation": conversation})

    assert error["code"] == "disk_full"
    assert _needed_bytes(error) > len(lost)
    assert "free" in error["message"]
    messages = _logged_messages(small_disk.home, conversation)
    assert [m.content for m in messages if m.role == "user"] == [
        "first, acknowledged",
        "third, acknowledged",
    ]
    assert {m.id for m in messages} >= {*first["message_ids"], *after["message_ids"]}
    assert not any(lost in m.content for m in messages)


def test_a_reply_refused_by_a_full_disk_stays_out_of_the_log_and_the_context(
    small_disk: SmallDisk, daemon_on_small_disk: DaemonRunner
) -> None:
    daemon = daemon_on_small_disk
    unsaved = "a long reply the full disk refuses " * 500

    def fill_then_reply(_request: ModelRequest) -> ModelResponse:
        small_disk.fill()
        return text_reply(unsaved)

    provider = ScriptedProvider([text_reply("hello"), fill_then_reply, text_reply("still here")])
    daemon.start(provider=provider)
    conversation = daemon.result("chat", {"text": "hi"})["conversation_id"]

    error = _turn_error(daemon.call("chat", {"text": "say a lot", "conversation": conversation}))
    small_disk.free()
    after = daemon.result("chat", {"text": "and now?", "conversation": conversation})

    assert error["code"] == "disk_full"
    assert _needed_bytes(error) > 0
    assert after["text"] == "still here"
    assert not any(unsaved in m.content for m in provider.requests[-1].messages)
    messages = _logged_messages(small_disk.home, conversation)
    assert not any(unsaved in m.content for m in messages)
    assert [m.content for m in messages if m.role == "user" and m.kind == "message"] == [
        "hi",
        "say a lot",
        "and now?",
    ]
    assert messages[-1].content == "still here"
