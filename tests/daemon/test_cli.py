"""agentctl as a user runs it, a real process on a temporary AGENTD_HOME, against the
daemon in this worker (``serving``, tests/daemon/conftest.py); ``agentd serve`` as a real
process where the process is what is tested: SIGTERM, ``shutdown``'s exit code, its serve
lock against a second one, the log file its entry point sets up."""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd import __version__
from agentd.client.parser import build_parser, parse_args
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess, run_agentctl, socket_exists
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def agentd() -> Iterator[AgentdProcess]:
    """``agentd serve``, for the tests of the process itself."""
    process = AgentdProcess().start()
    yield process
    process.stop()


def test_the_readme_first_session(serving: DaemonRunner) -> None:
    chat = run_agentctl("chat", "-p", "我更喜欢用 tabs 缩进")
    assert (chat.returncode, chat.stdout) == (0, "（mock）我听到了：我更喜欢用 tabs 缩进\n")

    log = run_agentctl("memory", "log")
    assert log.returncode == 0 and "chore: initialize local memory" in log.stdout

    path = run_agentctl("memory", "path")
    assert path.returncode == 0 and Path(path.stdout.strip(), "system", "human.md").is_file()

    human = run_agentctl("memory", "show", "system/human.md")
    assert human.returncode == 0 and "description: What I know about the user." in human.stdout


def test_messages_and_status_are_printed_for_people_and_for_scripts(
    serving: DaemonRunner,
) -> None:
    run_agentctl("chat", "-p", "hello")
    listing = run_agentctl("messages")
    assert listing.returncode == 0
    assert [line.split()[2] for line in listing.stdout.splitlines()] == ["assistant", "user"]
    status = json.loads(run_agentctl("status", "--json").stdout)
    assert status["ready"] is True and [a["name"] for a in status["agents"]] == ["default"]
    assert status["agents"][0]["reflection"]["trigger"] == "compaction-event"
    assert status["redis"]["reachable"] is False and status["redis"]["embedded"] is True


def test_interactive_chat_reads_lines_until_end_of_input(serving: DaemonRunner) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentd.client", "chat"],
        input="first\nsecond\n",
        capture_output=True,
        text=True,
        timeout=ceiling(30),
    )
    assert result.returncode == 0
    assert "（mock）我听到了：first" in result.stdout
    assert "（mock）我听到了：second" in result.stdout


def test_a_daemon_error_prints_code_and_message_and_exits_1(serving: DaemonRunner) -> None:
    result = run_agentctl("agents", "show", "ghost")
    assert result.returncode == 1
    assert result.stderr.startswith("unknown_agent: ")


def test_without_a_daemon_agentctl_says_how_to_start_it() -> None:
    result = run_agentctl("status")
    assert result.returncode == 1
    assert "agentd is not running" in result.stderr and "agentd up" in result.stderr


def test_bad_usage_exits_2_before_asking_the_daemon() -> None:
    for args in (
        ("chat", "--no-such-flag"),
        (),
        ("messages", "--around", "msg-x", "--before", "x"),
        ("messages", "--limit", "0"),
        ("search", "port", "--since", "yesterday"),
        ("reflections", "--limit", "many"),
    ):
        result = run_agentctl(*args)
        assert result.returncode == 2, args
        assert "usage: agentctl" in result.stderr, args


def test_an_option_may_stand_between_an_action_and_its_argument() -> None:
    for argv in (
        ["memory", "why", "-a", "ada", "pnpm"],
        ["memory", "why", "pnpm", "-a", "ada"],
        ["memory", "-a", "ada", "why", "pnpm"],
    ):
        args = parse_args(argv)
        assert (args.action, args.path, args.agent) == ("why", "pnpm", "ada"), argv
    args = parse_args(["conversations", "delete", "-a", "ada", "conv-1"])
    assert (args.action, args.conversation, args.agent) == ("delete", "conv-1", "ada")
    for extra in (
        ["memory", "why", "-a", "ada", "pnpm", "npm"],
        ["memory", "why", "-a", "ada", "-z"],
    ):
        result = run_agentctl(*extra)
        assert result.returncode == 2 and "unrecognized arguments: " in result.stderr, extra


def test_reflection_settings_keeps_its_old_name_sleeptime_as_an_alias() -> None:
    argv = ["--agent", "ada", "--trigger", "step-count", "--steps", "3", "--merge", "explicit"]
    new, old = parse_args(["reflection-settings", *argv]), parse_args(["sleeptime", *argv])
    assert new.handler is old.handler
    assert (new.agent, new.trigger, new.steps, new.merge) == ("ada", "step-count", 3, "explicit")
    assert (old.agent, old.trigger, old.steps, old.merge) == ("ada", "step-count", 3, "explicit")
    assert "reflection-settings (sleeptime)" in build_parser().format_help()


def test_version_prints_the_version() -> None:
    result = run_agentctl("--version")
    assert (result.returncode, result.stdout) == (0, f"agentctl {__version__}\n")


def test_every_flag_and_argument_in_every_help_says_what_it_is() -> None:
    def undescribed(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                described = {choice.dest for choice in action._choices_actions if choice.help}
                commands: dict[int, str] = {}
                for name, subparser in action.choices.items():
                    commands.setdefault(id(subparser), name)
                for name, subparser in action.choices.items():
                    if commands[id(subparser)] != name:
                        continue  # an alias: its command is checked under its own name
                    if name not in described:
                        yield f"{path} {name}"
                    yield from undescribed(subparser, f"{path} {name}")
            elif not action.help:
                yield f"{path} {'/'.join(action.option_strings) or action.dest}"

    assert list(undescribed(build_parser(), "agentctl")) == []


def test_sigterm_stops_the_daemon_cleanly_and_removes_its_socket(
    agentd: AgentdProcess, agentd_home: Path
) -> None:
    run_agentctl("chat", "-p", "hi")
    assert run_agentctl("status").returncode == 0
    assert agentd.terminate() == 0
    assert not socket_exists()
    lines = [
        json.loads(line) for line in (agentd_home / "logs" / "agentd.log").read_text().splitlines()
    ]
    assert [line["event"] for line in lines if line["level"] == "error"] == []
    assert lines[-1]["event"] == "agentd_stopped"


def test_shutdown_from_agentctl_exits_0(agentd: AgentdProcess) -> None:
    result = run_agentctl("shutdown")
    assert (result.returncode, result.stdout, result.stderr) == (0, "agentd is stopping\n", "")
    assert agentd.proc is not None and agentd.proc.wait(ceiling(10)) == 0


def test_a_second_daemon_on_the_same_home_refuses_to_start(agentd: AgentdProcess) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "serve"],
        capture_output=True,
        text=True,
        timeout=ceiling(30),
    )
    assert second.returncode == 1
    assert "already running" in second.stderr
    assert run_agentctl("status").returncode == 0


def test_turn_logs_are_json_with_agent_conversation_and_turn_ids(
    agentd: AgentdProcess, agentd_home: Path
) -> None:
    run_agentctl("chat", "-p", "hi")
    lines = [
        json.loads(line) for line in (agentd_home / "logs" / "agentd.log").read_text().splitlines()
    ]
    finished = next(line for line in lines if line["event"] == "turn_finished")
    assert finished["agent_id"].startswith("agent-")
    assert finished["conversation_id"].startswith("conv-")
    assert finished["turn_id"].startswith("turn-")
    assert finished["stop_reason"] == "end_turn"


def test_agentctl_imports_neither_litellm_celery_git_nor_pydantic() -> None:
    probe = (
        "import sys, agentd.client as c\n"
        "c.main(['status'])\n"
        "print(sorted(m for m in ('litellm', 'celery', 'git', 'pydantic') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.strip() == "[]"


def test_twenty_turns_in_a_small_window_compact_by_pressure_and_keep_every_message(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start(context_window=1200)
    texts = [f"第 {n} 个无关话题：" + "今天天气不错。" * 12 for n in range(1, 21)]
    printed = "".join(run_agentctl("chat", "-p", text).stdout for text in texts)
    context = run_agentctl("context")
    daemon.stop()

    compactions = [line for line in printed.splitlines() if "⇣ compacted" in line]
    assert len(compactions) >= 3
    assert all(line.startswith("  ⇣ compacted (context_pressure): ") for line in compactions)
    (log,) = agentd_home.glob("agents/*/conversations/*/messages.jsonl")
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [m["content"] for m in logged if m["role"] == "user" and "kind" not in m] == texts
    assert "under the threshold" in context.stdout
    assert "threshold         960 tokens" in context.stdout


def test_search_prints_hits_best_first(serving: DaemonRunner) -> None:
    run_agentctl("chat", "-p", "我们的数据库端口是 5433，别用默认的 5432")
    run_agentctl("chat", "-p", "还记得数据库端口吗？")
    result = run_agentctl("search", "数据库端口")
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert result.returncode == 0
    assert {"还记得数据库端口吗？", "我们的数据库端口是 5433，别用默认的 5432"} <= {
        row[4] for row in rows
    }
    assert sorted((float(row[0]) for row in rows), reverse=True) == [float(r[0]) for r in rows]


def test_of_two_daemons_started_at_once_one_serves_and_the_other_says_it_is_running(
    agentd_home: Path,
) -> None:
    outputs = [agentd_home / f"serve-{n}.err" for n in (1, 2)]
    racers = []
    for output in outputs:
        with open(output, "w") as stderr:
            racers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "agentd.cli", "serve"],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            )
    try:
        wait_for(
            lambda: any(racer.poll() is not None for racer in racers),
            "one of the two daemons to give up",
        )
        (loser,) = [n for n, racer in enumerate(racers) if racer.poll() is not None]
        assert racers[loser].returncode == 1
        assert "agentd serve is already running" in outputs[loser].read_text()
        # The loser can give up while the winner is still starting: wait for it to answer.
        wait_for(lambda: run_agentctl("status").returncode == 0, "the winner to answer status")
        assert racers[1 - loser].poll() is None
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.terminate()
                racer.wait(ceiling(20))


def test_a_daemon_still_starting_already_keeps_a_second_one_out(agentd_home: Path) -> None:
    """The home's serve lock is taken before anything else: held here as a daemon that has
    not bound its socket yet would hold it."""
    lock = Layout(agentd_home).serve_lock
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as starting:
        fcntl.flock(starting, fcntl.LOCK_EX)
        second = subprocess.run(
            [sys.executable, "-m", "agentd.cli", "serve"],
            capture_output=True,
            text=True,
            timeout=ceiling(30),
        )
    assert second.returncode == 1
    assert f"agentd serve is already running for {agentd_home}" in second.stderr
    assert not socket_exists()
