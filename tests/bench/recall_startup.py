"""Recall's start-up over a persisted index, the last section of ``recall_bench.py``.

A home whose logs hold the bench's corpus (one agent, its 200 conversations) is indexed
once (the real ``RecallService``, which then commits and stops in order), and then
started again, each time in a process of its own as after a restart:

- the recall process alone: ``python -m agentd.recall.process`` spawned on a socket pair,
  as the daemon spawns it, sent ``start`` and a search; timed from the spawn to the
  search's answer (imports, opening the index, checking each log's last indexed line,
  the search);
- the whole daemon: ``agentd serve`` (mock model, no Redis) spawned and timed until a
  search sent over its socket (``Connection``, connecting again until the socket answers)
  comes back with its hits, and the recall state it reported then.

Before each start the agent's files (index and logs) are read whole, so that "warm" means
warm whatever ran before, or with ``--cold`` dropped from the page cache
(``posix_fadvise``), as after a reboot (the interpreter's and the packages' files stay
cached: a reboot would add their first read too).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared.errors import ClientError

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(ROOT))

from agentd.client.connection import Connection  # noqa: E402
from agentd.recall.frames import encode, read_frame  # noqa: E402
from agentd.recall.service import RecallService  # noqa: E402
from shared.models.agents import BASE_SYSTEM_PROMPT, AgentRecord  # noqa: E402
from shared.models.messages import Message, ToolCall  # noqa: E402
from shared.recall.documents import Document  # noqa: E402
from shared.recall.ranking import SearchRequest  # noqa: E402
from shared.store.agents import AgentStore  # noqa: E402
from shared.store.jsonl import MessageLog  # noqa: E402
from shared.store.layout import Layout  # noqa: E402

AGENT = "bench"
FIRST_QUERY = SearchRequest("数据库端口")
"""The first search after the start (a CJK one: a phrase of bigrams)."""
BATCH = 20_000
"""Messages per append while writing the logs (each append is fsync'd)."""
POLL_S = 0.01
CONNECT_POLL_S = 0.002
TIMEOUT_S = 600.0
LOG = ("WARNING", "json")
"""The recall process's log level and format (its arguments after the home)."""
RUNS = 5
"""Starts of each kind (the median is reported, and the range)."""


# --- the home ------------------------------------------------------------------------------


def write_home(home: Path, documents: Iterable[Document]) -> int:
    """The corpus as the agent's conversation logs; returns their size in bytes. An echo
    (a recall search and its result) is written as a ``recall_search`` call and its answer,
    so the logs are read back into the very documents."""
    layout = Layout(home)
    pending: dict[str, list[Message]] = {}
    calls: dict[str, str] = {}
    for document in documents:
        messages = pending.setdefault(document.conversation_id, [])
        messages.append(_message(document, calls))
        if len(messages) >= BATCH:
            _append(layout, document.conversation_id, messages)
            pending[document.conversation_id] = []
    for conversation_id, messages in pending.items():
        _append(layout, conversation_id, messages)
    if not layout.agent_file(AGENT).exists():  # the daemon opens the agents it has a record of
        AgentStore(layout).save(AgentRecord(id=AGENT, name=AGENT, system_prompt=BASE_SYSTEM_PROMPT))
    return sum(layout.conversation_files(AGENT, c).messages.stat().st_size for c in pending)


def _message(document: Document, calls: dict[str, str]) -> Message:
    fields: dict[str, Any] = {
        "id": document.message_id,
        "agent_id": AGENT,
        "conversation_id": document.conversation_id,
        "role": document.role,
        "created_at": datetime.fromtimestamp(document.created_at, UTC),
        "content": document.text,
    }
    if document.echo and document.role == "assistant":
        lead, name, arguments = ("\n" + document.text).rsplit("\n", 2)
        call = calls[document.conversation_id] = f"call-{document.message_id}"
        fields["content"] = lead[1:]
        fields["tool_calls"] = [ToolCall(id=call, name=name, arguments=arguments)]
    elif document.echo:
        fields["tool_call_id"] = calls[document.conversation_id]
    return Message.of(**fields)


def _append(layout: Layout, conversation_id: str, messages: list[Message]) -> None:
    path = layout.conversation_files(AGENT, conversation_id).messages
    path.parent.mkdir(parents=True, exist_ok=True)
    MessageLog(path).append(messages)


def first_start(home: Path) -> dict[str, float]:
    """Index every log with no index on disk, then stop in order."""
    service = RecallService(Layout(home))
    started = time.perf_counter()
    service.start([AGENT])
    while service.status(AGENT)["state"] != "ready":
        time.sleep(POLL_S)
    ready = time.perf_counter() - started
    service.flush(timeout_s=TIMEOUT_S)
    on_disk = service.status(AGENT)["bytes_on_disk"]
    assert isinstance(on_disk, int)
    return {"ready_s": ready, "bytes_on_disk": on_disk}


# --- the starts ------------------------------------------------------------------------------


def _page_cache(directory: Path, cold: bool) -> None:
    """The agent's files out of the OS's cache, as after a reboot, or (warm) all of them
    in it, whatever an earlier run left there."""
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if cold:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 8 << 20):
                    pass
        finally:
            os.close(fd)


def recall_process(home: Path) -> dict[str, Any]:
    """``agentd.recall.process`` spawned as the daemon spawns it: spawn to first answer."""
    ours, theirs = socket.socketpair()
    started = time.perf_counter()
    with theirs:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentd.recall.process", str(theirs.fileno()), str(home), *LOG],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
        )
    ours.sendall(encode(("start", [AGENT])))
    ours.sendall(encode(("call", 1, "search", (AGENT, FIRST_QUERY))))
    frame = read_frame(ours)
    elapsed = time.perf_counter() - started
    ours.sendall(encode(("call", 2, "status", (AGENT,))))
    status = read_frame(ours)
    ours.close()
    process.wait(TIMEOUT_S)
    assert frame is not None and frame[2], frame
    assert status is not None
    return {
        "first_answer_s": elapsed,
        "hits": len(frame[3].hits),
        "incomplete": frame[3].incomplete,
        "state": status[3]["state"],
    }


def daemon(home: Path) -> dict[str, Any]:
    """``agentd serve`` on the home: spawn to first answered search over its socket."""
    os.environ["AGENTD_HOME"] = str(home)  # where Connection looks for the socket
    env = {**os.environ, "AGENTD_MODEL": "mock", "PYTHONPATH": str(ROOT)}
    with open(home / "bench-daemon.log", "wb") as output:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "serve"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            connection = _connect(process)
            socket_s = time.perf_counter() - started
            first = connection.result("recall.search", {"agent": AGENT, "query": FIRST_QUERY.query})
            answered = time.perf_counter() - started
            (agent,) = [a for a in connection.result("status")["agents"] if a["id"] == AGENT]
            connection.close()
        finally:
            process.terminate()
            process.wait(TIMEOUT_S)
    return {
        "first_answer_s": answered,
        "socket_s": socket_s,
        "hits": len(first["hits"]),
        "incomplete": first["incomplete"],
        "state": agent["recall"]["state"],
    }


def _connect(process: subprocess.Popen[bytes]) -> Connection:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return Connection()
        except ClientError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(CONNECT_POLL_S)


def measure(home: Path, documents: list[Document], sets: object) -> None:
    """Write the home (or reuse one a previous run left), index it, then time the starts."""
    home.mkdir(parents=True, exist_ok=True)
    layout = Layout(home)
    marker = home / "bench-first-start.json"
    if not marker.exists():
        logs = write_home(home, documents)
        figures = {"logs": logs, **first_start(home)}
        marker.write_text(json.dumps(figures))
    figures = json.loads(marker.read_text())
    raw = sum(len(d.text.encode()) for d in documents)
    print(
        f"\nstart-up, {len(documents):,} messages (logs {figures['logs'] / 1e6:,.0f} MB): the"
        f" first start, with no index on disk, indexed them in {figures['ready_s']:.0f} s"
        f" ({len(documents) / figures['ready_s']:,.0f} msg/s from the logs);"
        f" {figures['bytes_on_disk'] / 1e6:,.0f} MB on disk"
        f" ({figures['bytes_on_disk'] / raw:.2f}× the raw text)"
    )
    agent_dir = layout.agent_dir(AGENT)
    print("| start | page cache | median (range) | hits, state, told |\n|---|---|---|---|")
    for name, start in (("recall process spawned → first answer", recall_process),
                        ("`agentd serve` spawned → first search answered", daemon)):  # fmt: skip
        for cold in (False, True):
            runs = []
            for _ in range(RUNS):
                _page_cache(agent_dir, cold)
                runs.append(start(home))
            seconds = [run["first_answer_s"] for run in runs]
            last = runs[-1]
            print(
                f"| {name} | {'dropped' if cold else 'warm'} |"
                f" {statistics.median(seconds) * 1000:.0f} ms"
                f" ({min(seconds) * 1000:.0f}–{max(seconds) * 1000:.0f}) |"
                f" {last['hits']}, `{last['state']}`, {last['incomplete']} |",
                flush=True,
            )
