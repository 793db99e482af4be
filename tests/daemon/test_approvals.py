"""Approvals as a user meets them: the real ``agentctl`` against the daemon in this worker
(tests/daemon/conftest.py), and a real ``agentd serve`` where it is killed -9; the mock
model calling ``bash`` when told to "run `CMD`", which the agent's settings say needs a
yes. The command leaves a mark in the workspace, so how many times it really ran is
counted on disk, not taken from what anything printed; what the model read of the call's
result is what the mock answers (``The command printed: …`` / ``The command did not run:
…``).

Two tests speak to a model on the scripted OpenAI-compatible server, through litellm,
because only it can show what they pin: a step of several calls in the model's order, and
what the model is sent on the turn after a restart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.home import agentd_home
from shared.message_refs import short_id
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import FakeOpenAIServer, chat_completion, tool_call
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow

CLEANING = "echo ran >> count.txt; echo cleaned"
CLEAN = json.dumps({"command": CLEANING})
"""The gated call: each run adds a line to ``count.txt`` in the agent's workspace."""
ASK = f"run `{CLEANING}`"
"""What makes the mock model call ``bash`` with :data:`CLEAN`."""


def start_agentd(**env: str) -> AgentdProcess:
    return AgentdProcess(**env).start(timeout_s=120)


def on_litellm(server: FakeOpenAIServer) -> dict[str, Any]:
    """The settings of a daemon whose model is litellm speaking to ``server``."""
    return {
        "model": "openai/test-model",
        "api_base": server.url,
        "api_key": "sk-test",
        "context_window": 32000,
    }


def in_the_environment(settings: dict[str, Any]) -> dict[str, str]:
    """``settings`` as ``agentd serve`` reads them."""
    return {f"AGENTD_{name.upper()}": str(value) for name, value in settings.items()}


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    """``agentd serve``, for the tests that kill it."""
    process = start_agentd()
    yield process
    process.stop()


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_agentctl(*args, timeout_s=120)


def ok(*args: str) -> Any:
    """The ``--json`` answer of a command that must succeed."""
    done = ctl(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def make_ada() -> dict[str, Any]:
    """Agent ``ada``, whose bash calls wait for a yes."""
    assert ctl("agents", "create", "ada").returncode == 0
    updated = ctl("agents", "update", "ada", "--approve", "bash")
    assert updated.returncode == 0, updated.stderr
    return ok("agents", "show", "ada")


@pytest.fixture
def ada(serving: DaemonRunner) -> dict[str, Any]:
    return make_ada()


def workspace(agent: dict[str, Any]) -> Path:
    return Layout(agentd_home()).workspace_dir(agent["id"])


def runs(agent: dict[str, Any]) -> int:
    """How many times the gated command really ran."""
    count = workspace(agent) / "count.txt"
    return len(count.read_text().splitlines()) if count.exists() else 0


def said() -> list[tuple[str, str | None]]:
    """Ada's conversation so far: each message's role and stop reason, oldest first."""
    messages = ok("messages", "--agent", "ada", "--order", "asc")
    return [(m["role"], m.get("stop_reason")) for m in messages]


WAITING = [("user", None), ("assistant", "requires_approval")]
"""A conversation whose one turn stopped on the gated call (the model was asked once)."""


def ask_to_clean() -> str:
    """A turn that stops on the gated call; the approval's short id."""
    waits = ctl("chat", "-p", ASK, "--agent", "ada")
    assert waits.returncode == 3, waits.stderr
    match = re.search(r"\(awaiting approval (\w{8})\)", waits.stdout)
    assert match is not None, waits.stdout
    return match.group(1)


def test_a_gated_call_waits_is_listed_and_counted_and_approve_runs_it_and_goes_on(
    ada: dict[str, Any],
) -> None:
    assert (
        "approve        bash (each call waits for your yes)" in ctl("agents", "show", "ada").stdout
    )

    waits = ctl("chat", "-p", ASK, "--agent", "ada")

    assert waits.returncode == 3
    (line,) = waits.stdout.splitlines()
    short = line.rsplit(" ", 1)[1].rstrip(")")
    assert line == f"  ⚙ bash({CLEAN})  (awaiting approval {short})"
    assert waits.stderr.splitlines() == [
        f"  ■ bash waits for your approval: agentctl approve {short}   "
        f"(or: agentctl deny {short} --reason TEXT)"
    ]
    assert runs(ada) == 0 and said() == WAITING

    (listed,) = ok("approvals")
    assert short_id(listed["id"]) == short
    assert (listed["agent"], listed["name"], listed["arguments"]) == ("ada", "bash", CLEAN)
    conversation = listed["conversation_id"]
    assert conversation == ada["default_conversation_id"]
    messages = ok("messages", "--agent", "ada", "--order", "asc")
    assert listed["turn_id"] == messages[-1]["turn_id"] and listed["since"].endswith("Z")
    human = ctl("approvals").stdout.splitlines()
    assert len(human) == 1 and human[0].startswith(f"{short}  ")
    assert f"  ada  {conversation}  turn {short_id(listed['turn_id'])}  bash({CLEAN})" in human[0]
    assert [a["approvals_waiting"] for a in ok("status")["agents"]] == [1]
    assert "approvals 1 tool call waiting: `agentctl approvals`" in ctl("status").stdout

    approved = ctl("approve", short)

    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines() == [
        f"  ⚙ bash({CLEAN})",
        "  ✓ cleaned",
        "The command printed: cleaned",
    ], "the model read what the call printed"
    assert runs(ada) == 1
    after = ok("messages", "--agent", "ada", "--order", "asc")
    assert [(m["role"], m.get("stop_reason")) for m in after] == [
        *WAITING,
        ("tool", None),
        ("assistant", "end_turn"),
    ]
    assert after[2]["content"] == "cleaned"
    assert len({m["turn_id"] for m in after}) == 1, "the answer carried the same turn on"
    assert ok("approvals") == []
    assert ctl("approvals").stderr == "no tool call waits for your approval\n"
    assert "approvals 0 tool calls waiting" in ctl("status").stdout


def test_deny_with_a_reason_runs_nothing_and_the_model_reads_the_reason(
    ada: dict[str, Any],
) -> None:
    short = ask_to_clean()

    denied = ctl("deny", short, "--reason", "the release needs that build")

    assert denied.returncode == 0, denied.stderr
    assert denied.stdout.splitlines() == [
        "  ✗ the user denied this call: the release needs that build",
        "The command did not run: the user denied this call: the release needs that build",
    ], "the model read the denial and its reason as the call's error"
    assert runs(ada) == 0
    again = ctl("approve", short)
    assert again.returncode == 1
    assert again.stderr.startswith(f"already_answered: approval {short} (bash) was denied already")
    assert runs(ada) == 0
    assert said() == [*WAITING, ("tool", None), ("assistant", "end_turn")]


def test_a_new_message_while_a_call_waits_is_refused_naming_it_and_nothing_is_sent(
    ada: dict[str, Any],
) -> None:
    short = ask_to_clean()

    refused = ctl("chat", "-p", "never mind, what time is it?", "--agent", "ada")

    assert refused.returncode == 1
    assert refused.stderr.startswith("approval_pending: ada's turn in this conversation waits")
    assert f"bash({CLEAN}) as approval {short}" in refused.stderr
    assert f"`agentctl approve {short}`" in refused.stderr
    assert "Your message was not sent" in refused.stderr
    assert said() == WAITING, "the refused message reached the conversation"
    users = [m["content"] for m in ok("messages", "--agent", "ada") if m["role"] == "user"]
    assert users == [ASK]
    # Another conversation of the agent is not held up.
    other = ctl("conversations", "new", "--agent", "ada").stdout.strip()
    elsewhere = ctl("chat", "-p", "what time is it?", "--agent", "ada", "-c", other)
    assert (elsewhere.returncode, elsewhere.stdout) == (0, "（mock）我听到了：what time is it?\n")

    assert ctl("deny", short).returncode == 0
    now = ctl("chat", "-p", "what time is it?", "--agent", "ada")
    assert (now.returncode, now.stdout) == (0, "（mock）我听到了：what time is it?\n")


def test_of_clients_approving_one_call_at_once_one_runs_it_and_the_others_are_told_already_answered(
    ada: dict[str, Any],
) -> None:
    short = ask_to_clean()
    command = [sys.executable, "-m", "agentd.client", "approve", short]
    racers = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    finished = [(racer.wait(ceiling(120)), *racer.communicate()) for racer in racers]

    assert sorted(status for status, _, _ in finished) == [0, 1, 1, 1]
    for status, _out, err in finished:
        if status == 1:
            assert err.startswith(f"already_answered: approval {short} (bash) was approved already")
    assert runs(ada) == 1
    assert said() == [*WAITING, ("tool", None), ("assistant", "end_turn")], "the turn went on once"


def test_an_unknown_stale_or_malformed_approval_id_is_refused_and_changes_nothing(
    ada: dict[str, Any],
) -> None:
    short = ask_to_clean()

    unknown = ctl("approve", "ZZZZZZZZ")
    malformed = ctl("deny", "../../etc")

    assert unknown.returncode == 1
    assert unknown.stderr.startswith(
        "unknown_approval: no tool call waits with approval id 'ZZZZZZZZ'"
    )
    assert malformed.returncode == 1 and malformed.stderr.startswith("invalid_id:")
    assert [short_id(a["id"]) for a in ok("approvals")] == [short]
    assert runs(ada) == 0 and said() == WAITING

    assert ctl("approve", short).returncode == 0
    newer = ask_to_clean()
    stale = ctl("approve", short)
    assert stale.returncode == 1, "an answered step replaced by a newer one is stale"
    assert stale.stderr.startswith(
        f"unknown_approval: no tool call waits with approval id '{short}'"
    )
    assert [short_id(a["id"]) for a in ok("approvals")] == [newer]
    assert runs(ada) == 1


def test_which_tools_need_approval_is_checked_listed_and_cleared(
    ada: dict[str, Any],
) -> None:
    wrong = ctl("agents", "update", "ada", "--approve", "bash,bsh", "--name", "bob")

    assert wrong.returncode == 1
    assert wrong.stderr.startswith("unknown_tool: no tool named 'bsh'; an agent's tools are bash,")
    assert ok("agents", "show", "ada")["requires_approval"] == ["bash"]
    assert ctl("agents", "show", "bob").returncode == 1, "a refused update changes nothing"

    both = ctl("agents", "update", "ada", "--approve", "write_file", "--approve", "bash", "--json")
    assert json.loads(both.stdout)["requires_approval"] == ["bash", "write_file"]
    assert "approve        bash, write_file (each call waits" in ctl("agents", "show", "ada").stdout

    cleared = ctl("agents", "update", "ada", "--approve", "none", "--json")
    assert json.loads(cleared.stdout)["requires_approval"] == []
    assert "approve        none" in ctl("agents", "show", "ada").stdout
    usage = ctl("agents", "update", "ada", "--approve", "none,bash")
    assert usage.returncode == 2 and "none alone" in usage.stderr


@pytest.mark.sdk  # imports litellm
def test_a_step_with_calls_that_need_no_approval_waits_whole_and_runs_in_the_models_order(
    daemon: DaemonRunner, server: FakeOpenAIServer
) -> None:
    """Several calls in one step: a model on the scripted server (the mock calls one)."""
    daemon.start(**on_litellm(server))
    ada = make_ada()
    write = json.dumps({"path": "plan.txt", "content": "written first\n"})
    copy = json.dumps({"command": "cat plan.txt >> order.txt; echo copied"})
    server.enqueue(
        body=chat_completion(
            None,
            tool_calls=[
                tool_call("write_file", write, id="call-w"),
                tool_call("bash", copy, id="call-b"),
            ],
        )
    )
    waits = ctl("chat", "-p", "plan, then copy", "--agent", "ada")

    assert waits.returncode == 3
    assert not (workspace(ada) / "plan.txt").exists(), "write_file ran before the answer"
    (listed,) = ok("approvals")
    assert listed["name"] == "bash", "only the gated call is asked about"

    server.enqueue(body=chat_completion("Planned and copied."))
    approved = ctl("approve", short_id(listed["id"]))

    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[-1] == "Planned and copied."
    assert (workspace(ada) / "order.txt").read_text() == "written first\n"
    tools = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call-w", "call-b"]


def test_an_answered_turn_counts_its_steps_once_and_recall_finds_the_call_and_its_result(
    ada: dict[str, Any],
) -> None:
    def steps() -> int:
        (agent,) = ok("status")["agents"]
        return int(agent["steps_since_last_reflection"])

    assert ctl("chat", "-p", "hi", "--agent", "ada").returncode == 0
    assert steps() == 1
    waits = ctl("chat", "-p", "run `echo nrocarbez | rev`", "--agent", "ada")
    assert waits.returncode == 3
    assert steps() == 1, "a waiting turn is not counted (it has not ended)"

    (listed,) = ok("approvals")
    approved = ctl("approve", short_id(listed["id"]))
    assert approved.returncode == 0 and "The command printed: zebracorn" in approved.stdout

    assert steps() == 3, "both of the turn's assistant messages, counted once when it ended"
    call_hits = ok("search", "nrocarbez", "--agent", "ada", "--role", "assistant")
    result_hits = ok("search", "zebracorn", "--agent", "ada", "--role", "tool")
    assert any("nrocarbez" in hit["text"] for hit in call_hits)
    assert [hit["text"] for hit in result_hits] == ["zebracorn"]


def test_after_kill_9_while_a_call_waits_it_is_still_listed_and_approving_it_runs_it(
    agentd: AgentdProcess,
) -> None:
    ada = make_ada()
    short = ask_to_clean()
    agentd.kill()

    restarted = start_agentd()
    try:
        assert [short_id(a["id"]) for a in ok("approvals")] == [short]
        approved = ctl("approve", short)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.splitlines()[-1] == "The command printed: cleaned"
        assert runs(ada) == 1
    finally:
        restarted.stop()


def test_after_kill_9_while_an_approved_call_runs_it_is_not_run_again_and_the_model_is_told(
    agentd: AgentdProcess, server: FakeOpenAIServer
) -> None:
    """Restarted on a model on the scripted server: only its request log shows what the
    model is sent on the next turn."""
    ada = make_ada()
    slow = "echo ran >> count.txt; sleep 600"
    assert ctl("chat", "-p", f"run `{slow}`", "--agent", "ada").returncode == 3
    (listed,) = ok("approvals")
    assert listed["arguments"] == json.dumps({"command": slow})
    approving = subprocess.Popen(
        [sys.executable, "-m", "agentd.client", "approve", short_id(listed["id"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: runs(ada) == 1, "the approved command to start", timeout_s=120)
    agentd.kill()
    assert approving.wait(ceiling(60)) == 1

    restarted = start_agentd(**in_the_environment(on_litellm(server)))
    try:
        assert ok("approvals") == []
        log = ok("messages", "--agent", "ada", "--order", "asc")
        assert [(m["role"], m["kind"]) for m in log] == [
            ("user", "message"),
            ("assistant", "message"),
            ("tool", "message"),
            ("assistant", "stop"),
        ]
        result, stop = log[2], log[3]
        assert result["is_error"] and result["content"].startswith(
            "[interrupted: agentd stopped while this approved call ran, so it may or may not "
            "have taken effect; it was not run again"
        )
        assert (stop["stop_reason"], stop["metadata"]["code"]) == ("cancelled", "interrupted")
        again = ctl("approve", short_id(listed["id"]))
        assert again.returncode == 1 and again.stderr.startswith("already_answered:")

        server.enqueue(body=chat_completion("I see it was interrupted."))
        after = ctl("chat", "-p", "did it finish?", "--agent", "ada")
        assert after.returncode == 0, after.stderr
        told = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in told] == [result["content"]]
        assert runs(ada) == 1, "the approved command ran once, never again"
    finally:
        restarted.stop()


def test_of_an_approve_and_a_deny_at_once_the_one_that_won_is_what_happened(
    ada: dict[str, Any],
) -> None:
    short = ask_to_clean()
    answers = ["approve", "deny", "approve", "deny"]
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "agentd.client", answer, short],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for answer in answers
    ]
    finished = [(racer.wait(ceiling(120)), *racer.communicate()) for racer in racers]

    winners = [
        answer for answer, (status, _, _) in zip(answers, finished, strict=True) if status == 0
    ]
    assert len(winners) == 1, finished
    decided = "approved" if winners == ["approve"] else "denied"
    assert runs(ada) == (1 if decided == "approved" else 0)
    for status, _out, err in finished:
        if status != 0:
            assert err.startswith(
                f"already_answered: approval {short} (bash) was {decided} already"
            )
    (winner,) = (out for status, out, _ in finished if status == 0)
    read = "The command printed: cleaned" if decided == "approved" else "The command did not run"
    assert winner.splitlines()[-1].startswith(read), "the model read what happened"
    assert said() == [*WAITING, ("tool", None), ("assistant", "end_turn")]
