"""A turn's memory edit carries its provenance: ``memory why`` leads from the line back to
what the user said in that turn. Real daemon, real git; the model is scripted."""

from __future__ import annotations

import json

from shared.providers.scripted import ScriptedProvider, text_reply, tool_reply
from tests.support.daemon import DaemonRunner
from tests.support.names import model_path

NOTE = "---\nname: tools\ndescription: The user's tools\n---\n- uses pnpm, never npm\n"


def test_a_turn_s_memory_edit_names_its_tool_call_and_why_shows_the_user_s_message(
    daemon: DaemonRunner,
) -> None:
    provider = ScriptedProvider()
    daemon.start(provider=provider)
    memory_dir = daemon.result("agent.create", {"name": "writer"})["memory_dir"]
    note = model_path(memory_dir, "notes/tools.md")
    provider.enqueue(
        tool_reply(("write_file", json.dumps({"path": note, "content": NOTE}))),
        text_reply("noted"),
    )
    done = daemon.result("chat", {"agent": "writer", "text": "记住：我用 pnpm"})
    messages = daemon.result("messages.list", {"agent": "writer", "limit": 10, "order": "asc"})
    said, calling = messages["messages"][0], messages["messages"][1]
    assert calling["tool_calls"], "the second message is the tool call"

    (match,) = daemon.result("memory.why", {"agent": "writer", "text": "PNPM"})["matches"]

    assert (match["path"], match["line_no"], match["text"]) == (
        "notes/tools.md",
        5,
        "- uses pnpm, never npm",
    )
    provenance = match["commit"]["provenance"]
    assert provenance["kind"] == "turn"
    assert provenance["conversation_id"] == done["conversation_id"]
    assert provenance["message_id"] == calling["id"]
    assert [(e["message_id"], e["text"]) for e in match["evidence"]] == [
        (said["id"], "记住：我用 pnpm")
    ]
    assert match["commit"]["subject"] == "write_file: create notes/tools.md"
