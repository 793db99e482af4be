"""Recall's start-up from a persisted index, the last section of ``recall_bench.py``.

A home whose logs hold the bench's corpus (one agent, its 200 conversations) is started
twice, each time in a process of its own, so its memory is its own and its mappings new,
as a restarted daemon's:

- ``persist``: the first start, with no index on disk: the real ``RecallService`` reads
  every log, indexes it and writes its segments, then stops in order (writing the open
  segment, as ``agentd`` does). Beside it, an in-memory ``AgentIndex`` built from the same
  logs answers every query of the bench: the results the second start must give.
- ``open``: the second start, timed from ``RecallService()`` (and from the process's own
  start) to its first answered search; its memory (``RssAnon``, the heap, apart from
  ``RssFile``, the mapped pages, which are the OS's page cache) after the first answer and
  after every query; its query latency through ``RecallService.search`` and its results.
- ``daemon``: the whole daemon, as a user restarts it: ``python -m agentd.cli serve`` on
  the home (mock model, no Redis), timed from the spawn of that process until a search
  sent over its socket (``Connection``, connecting again until the socket answers) comes
  back with its hits; then ``status``: the agent's recall state at that moment, and the
  recall process's memory (``/proc/<pid>/status`` of ``recall_process.pid``) against the
  raw text; then, once the index is ready, the queries the socket can ask (no date or
  current-conversation filters) against the in-memory index's answers.

Before a start is spawned (:func:`run_child`, as ``recall_bench.py`` runs them), the
agent's files (index and logs) are all read, so that "warm" means warm whatever ran
before, or with ``--cold`` dropped from the page cache (``posix_fadvise``), as after a
reboot (the interpreter's and the packages' files stay cached: a reboot would add their
first read too).

    python tests/bench/recall_startup.py persist|open|daemon HOME [--cold]

Measured at 1,000,000 messages on the shared 2-core development VM (other engineers'
tests running; six runs of each): ``agentd serve`` spawned to first answered search
0.68-0.99 s warm, 0.89-1.33 s cold, state ``ready`` and nothing said missing; the recall
process's heap 154 MB (0.39x the raw text) at the first answer, its mapped index pages
130-210 MB beside it. Before the segments were mapped ``MADV_RANDOM`` a cold start took
5.1 s: each page a search missed was read with 8 MB of read-ahead around it.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(ROOT))

from agentd.client.connection import ClientError, Connection  # noqa: E402
from agentd.recall import RecallService  # noqa: E402
from shared.models.agents import BASE_SYSTEM_PROMPT, AgentRecord  # noqa: E402
from shared.models.messages import Message, ToolCall  # noqa: E402
from shared.recall.documents import Document, read_documents  # noqa: E402
from shared.recall.index import AgentIndex  # noqa: E402
from shared.recall.ranking import SearchRequest  # noqa: E402
from shared.store.agents import AgentStore  # noqa: E402
from shared.store.jsonl import MessageLog  # noqa: E402
from shared.store.layout import Layout  # noqa: E402

AGENT = "bench"
FIRST_QUERY = SearchRequest("数据库端口")
"""The first search after the start (a CJK one: it reads segment text, not only postings)."""
REQUESTS = "bench-requests.json"
EXPECTED = "bench-expected.json"
BATCH = 20_000
"""Messages per append while writing the logs (each append is fsync'd)."""
POLL_S = 0.01
CONNECT_POLL_S = 0.002
"""How often the daemon's socket is tried while it starts."""
DAEMON_TIMEOUT_S = 120.0
MOMENTS = ("after_first_answer", "after_ready", "after_queries", "after_queries_trimmed")


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


def save_requests(home: Path, sets: dict[str, list[SearchRequest]]) -> None:
    encoded = {
        kind: [
            {
                name: value.isoformat() if isinstance(value, datetime) else value
                for name, value in dataclasses.asdict(request).items()
            }
            for request in requests
        ]
        for kind, requests in sets.items()
    }
    (home / REQUESTS).write_text(json.dumps(encoded, ensure_ascii=False))


def load_requests(home: Path) -> dict[str, list[SearchRequest]]:
    encoded = json.loads((home / REQUESTS).read_text())
    dates = ("since", "until")
    return {
        kind: [
            SearchRequest(
                **{k: datetime.fromisoformat(v) if k in dates and v else v for k, v in r.items()}
            )
            for r in requests
        ]
        for kind, requests in encoded.items()
    }


# --- measuring -----------------------------------------------------------------------------


def memory(pid: int | str = "self") -> dict[str, int]:
    """Resident bytes of a process (this one by default): all (VmRSS), the heap and other
    private memory (RssAnon), and mapped files' pages (RssFile: the OS's page cache,
    shared, dropped under memory pressure rather than swapped)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            found[name] = int(value.split()[0]) * 1024
    return found


def _trimmed() -> dict[str, int]:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return memory()


def _wait_ready(service: RecallService) -> None:
    while service.status(AGENT)["state"] != "ready":
        time.sleep(POLL_S)


# --- the two starts ------------------------------------------------------------------------


def persist(home: Path) -> dict[str, Any]:
    """The first start: index the logs, write the segments, stop in order; then the
    in-memory index's answers to every query."""
    layout = Layout(home)
    started = time.perf_counter()
    service = RecallService(layout)
    service.start([AGENT])
    _wait_ready(service)
    ready = time.perf_counter() - started
    service.wait_for_writes()
    written = time.perf_counter() - started
    stop = time.perf_counter()
    service.write_open_segments(timeout_s=600)
    stopped = time.perf_counter() - stop
    figures = {"ready_s": ready, "written_s": written, "stop_s": stopped}
    figures["bytes_on_disk"] = service.status(AGENT)["bytes_on_disk"]

    started = time.perf_counter()
    index = AgentIndex()
    for directory in sorted(layout.conversations_dir(AGENT).iterdir()):
        index.build(read_documents(layout.conversation_files(AGENT, directory.name).messages))
    figures["in_memory_build_s"] = time.perf_counter() - started
    expected = {
        kind: [
            [(index.message_id(n), score) for n, score in index.search(request)]
            for request in requests
        ]
        for kind, requests in load_requests(home).items()
    }
    (home / EXPECTED).write_text(json.dumps(expected))
    return figures


def open_(home: Path) -> dict[str, Any]:
    """The second start: to its first answer, then every query, against the expected."""
    layout = Layout(home)
    figures: dict[str, Any] = {"before": _trimmed()}
    started = time.perf_counter()
    service = RecallService(layout)
    build = service.start([AGENT])
    first = asyncio.run(service.search(AGENT, FIRST_QUERY))
    figures["first_answer_s"] = time.perf_counter() - started
    figures["first_answer_at"] = time.time()
    figures["first_hits"] = len(first.hits)
    figures["first_incomplete"] = first.incomplete
    figures["state_at_first_answer"] = service.status(AGENT)["state"]
    figures["after_first_answer"] = memory()
    _wait_ready(service)
    figures["ready_s"] = time.perf_counter() - started
    build.join()  # the segments' checksums, verified in the background
    figures["verified_s"] = time.perf_counter() - started
    figures["after_ready"] = memory()

    requests = load_requests(home)
    expected = json.loads((home / EXPECTED).read_text())
    times: dict[str, list[float]] = {}
    differ: list[str] = []

    async def run_all() -> None:
        for kind, kind_requests in requests.items():
            times[kind] = []
            for n, request in enumerate(kind_requests):
                began = time.perf_counter()
                hits = (await service.search(AGENT, request)).hits
                times[kind].append((time.perf_counter() - began) * 1000)
                found = [(hit.message_id, hit.score) for hit in hits]
                if not _same(found, expected[kind][n]):
                    differ.append(f"[{kind}] {request.query}")

    asyncio.run(run_all())
    figures["after_queries"] = memory()
    figures["after_queries_trimmed"] = _trimmed()
    figures["times_ms"] = times
    figures["differ"] = differ
    figures["compared"] = sum(len(r) for r in requests.values())
    return figures


def _same(found: list[tuple[str, float]], expected: list[list[Any]]) -> bool:
    return [i for i, _ in found] == [i for i, _ in expected] and all(
        abs(a - e) <= 1e-9 for (_, a), (_, e) in zip(found, expected, strict=True)
    )


def _page_cache(directory: Path, cold: bool) -> None:
    """The agent's files (index and logs) out of the OS's cache, as after a reboot, or
    (warm) all of them in it, whatever an earlier run (a cold one) left there."""
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


# --- the daemon ----------------------------------------------------------------------------


def daemon(home: Path) -> dict[str, Any]:
    """``agentd serve`` on the home: spawn to first answered search over its socket, the
    state and the recall process's memory then; then every query the socket can ask."""
    layout = Layout(home)
    _ensure_agent(layout)
    os.environ["AGENTD_HOME"] = str(home)  # where Connection looks for the socket
    env = {**os.environ, "AGENTD_MODEL": "mock", "PYTHONPATH": str(ROOT)}
    figures: dict[str, Any] = {}
    with open(home / "bench-daemon.log", "wb") as output:
        spawned_at = time.time()
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "serve"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            connection = _connect(process)
            figures["socket_s"] = time.perf_counter() - started
            first = connection.result("recall.search", {"agent": AGENT, "query": FIRST_QUERY.query})
            figures["first_answer_s"] = time.perf_counter() - started
            status = connection.result("status")
            figures["status_s"] = time.perf_counter() - started
            figures["first_hits"] = len(first["hits"])
            figures["first_incomplete"] = first["incomplete"]
            (agent,) = [a for a in status["agents"] if a["id"] == AGENT]
            figures["state_at_first_answer"] = agent["recall"]["state"]
            recall_pid = status["recall_process"]["pid"]
            figures["recall_after_first_answer"] = memory(recall_pid)
            figures["daemon_after_first_answer"] = memory(process.pid)
            figures.update(_daemon_queries(home, connection, recall_pid))
            connection.close()
        finally:
            process.terminate()
            process.wait(DAEMON_TIMEOUT_S)
    figures["milestones_s"] = _milestones(home / "bench-daemon.log", spawned_at)
    return figures


MILESTONES = (
    "recall_process_spawned",
    "recall_process_started",
    "recall_index_opened",
    "agentd_listening",
)
"""Log events of a start, in the daemon's and the recall process's log lines."""


def _milestones(log_path: Path, spawned_at: float) -> dict[str, float]:
    """Seconds from the spawn to the first log line of each of :data:`MILESTONES`."""
    found: dict[str, float] = {}
    for line in log_path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event") if isinstance(event, dict) else None
        if name in MILESTONES and name not in found:
            at = datetime.fromisoformat(event["timestamp"]).timestamp()
            found[name] = at - spawned_at
    return found


def _ensure_agent(layout: Layout) -> None:
    """The daemon opens the recall index of the agents it has a record of."""
    if not layout.agent_file(AGENT).exists():
        AgentStore(layout).save(AgentRecord(id=AGENT, name=AGENT, system_prompt=BASE_SYSTEM_PROMPT))


def _connect(process: subprocess.Popen[bytes]) -> Connection:
    deadline = time.monotonic() + DAEMON_TIMEOUT_S
    while True:
        try:
            return Connection()
        except ClientError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(CONNECT_POLL_S)


def _recall_state(connection: Connection) -> str:
    (agent,) = [a for a in connection.result("status")["agents"] if a["id"] == AGENT]
    return str(agent["recall"]["state"])


def _daemon_queries(home: Path, connection: Connection, recall_pid: int) -> dict[str, Any]:
    """Once ready, the queries a socket request can express, against the expected."""
    deadline = time.monotonic() + DAEMON_TIMEOUT_S
    while _recall_state(connection) != "ready" and time.monotonic() < deadline:
        time.sleep(POLL_S)
    requests = load_requests(home)
    expected = json.loads((home / EXPECTED).read_text())
    times: list[float] = []
    differ: list[str] = []
    for kind, kind_requests in requests.items():
        for n, request in enumerate(kind_requests):
            if request.since or request.until or request.current_conversation_id:
                continue
            params = {
                "agent": AGENT,
                "query": request.query,
                "limit": request.limit,
                "conversation": request.conversation_id,
                "role": request.role,
            }
            began = time.perf_counter()
            hits = connection.result("recall.search", params)["hits"]
            times.append((time.perf_counter() - began) * 1000)
            found = [(hit["message_id"], hit["score"]) for hit in hits]
            if not _same(found, expected[kind][n]):
                differ.append(f"[{kind}] {request.query}")
    return {
        "times_ms": times,
        "differ": differ,
        "recall_after_queries": memory(recall_pid),
    }


# --- the parent's side ---------------------------------------------------------------------


def run_child(mode: str, home: Path, *extra: str) -> dict[str, Any]:
    """Run one start in a fresh process; its figures (``spawned_at``: when it was started).
    The page cache is made warm or cold (``--cold``) first, here: not in the time measured."""
    out = home / f"bench-{mode}{''.join(extra)}.json"
    if mode != "persist":
        _page_cache(Layout(home).agent_dir(AGENT), cold="--cold" in extra)
    spawned = time.time()
    subprocess.run(
        [sys.executable, __file__, mode, str(home), *extra],
        check=True,
        stdout=subprocess.DEVNULL,  # the service's log lines
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    figures = json.loads(out.read_text())
    figures["spawned_at"] = spawned
    return figures


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def mb(size: float) -> str:
    return f"{size / 1e6:,.0f} MB"


def report(total: int, raw: int, logs: int, first: dict[str, Any], opens: dict[str, Any]) -> None:
    """Print the figures, then the README's rows."""
    print(
        f"\nstart-up from a persisted index, {total:,} messages (logs {mb(logs)}, raw text"
        f" {mb(raw)}):\n"
        f"  first start, no index on disk: ready (every log indexed) after"
        f" {first['ready_s']:.1f} s, segments written after {first['written_s']:.1f} s;"
        f" an orderly stop wrote the open segment in {first['stop_s']:.2f} s;"
        f" {mb(first['bytes_on_disk'])} on disk ({first['bytes_on_disk'] / raw:.2f}x raw);"
        f" the in-memory index from the same logs took {first['in_memory_build_s']:.1f} s"
    )
    for label, figures in opens.items():
        base = figures["before"]
        print(f"  second start, {label}:")
        print(
            f"    first answered search ({FIRST_QUERY.query}, {figures['first_hits']} hits):"
            f" {figures['first_answer_s'] * 1000:.0f} ms after RecallService(),"
            f" {(figures['first_answer_at'] - figures['spawned_at']) * 1000:.0f} ms after the"
            f" process was spawned (interpreter and imports included); state then:"
            f" {figures['state_at_first_answer']}, told: {figures['first_incomplete']};"
            f" ready after {figures['ready_s']:.2f} s,"
            f" checksums verified after {figures['verified_s']:.1f} s"
        )
        print(
            f"    memory (VmRSS = RssAnon + RssFile; growth over the {mb(base['VmRSS'])} before"
            " the index was opened):"
        )
        for moment in (
            "after_first_answer",
            "after_ready",
            "after_queries",
            "after_queries_trimmed",
        ):
            now = figures[moment]
            growth = {k: now[k] - base[k] for k in now}
            print(
                f"      {moment.replace('_', ' '):<24} VmRSS {mb(now['VmRSS']):>8}"
                f" ({now['VmRSS'] / raw:.2f}x raw)  RssAnon {mb(now['RssAnon']):>8}"
                f" (+{mb(growth['RssAnon'])}, {growth['RssAnon'] / raw:.2f}x)"
                f"  RssFile {mb(now['RssFile']):>8} (+{mb(growth['RssFile'])})"
            )
        flat = [ms for samples in figures["times_ms"].values() for ms in samples]
        print(
            f"    {len(flat)} queries through RecallService.search (the hits' texts read from"
            f" the logs): p50 {percentile(flat, 0.5):.1f} ms, p95 {percentile(flat, 0.95):.1f} ms,"
            f" mean {statistics.fmean(flat):.1f} ms, max {max(flat):.1f} ms"
        )
        worst = max(figures["times_ms"], key=lambda k: percentile(figures["times_ms"][k], 0.5))
        print(
            f"    slowest type: {worst}, p50 {percentile(figures['times_ms'][worst], 0.5):.1f} ms;"
            f" results identical to the in-memory index's:"
            f" {'yes' if not figures['differ'] else 'NO'} ({figures['compared']} queries)"
        )
        for line in figures["differ"]:
            print(f"      differs: {line}")
    warm = opens["page cache warm"]
    print("\n| Start-up, persisted index | Target | Result |\n|---|---|---|")
    print(
        f"| First start with no index on disk, {total:,} | | ready after"
        f" {first['ready_s']:.0f} s; {mb(first['bytes_on_disk'])} on disk |"
    )
    for label, figures in opens.items():
        print(
            f"| Start to first answered search ({label}) | < 1 s |"
            f" {figures['first_answer_s'] * 1000:.0f} ms"
            f" ({(figures['first_answer_at'] - figures['spawned_at']) * 1000:.0f} ms from"
            " process spawn) |"
        )
    for moment, label in (
        ("after_first_answer", "opening"),
        ("after_queries", "every query"),
    ):
        now, base = warm[moment], warm["before"]
        anon = now["RssAnon"] - base["RssAnon"]
        print(
            f"| Heap (RssAnon) growth after {label} | ≤ 0.5× raw text | {mb(anon)},"
            f" {anon / raw:.2f}× (RSS {mb(now['VmRSS'])}, of which mapped pages"
            f" {mb(now['RssFile'])}) |"
        )
    flat = [ms for samples in warm["times_ms"].values() for ms in samples]
    print(
        f"| Query p50 / p95 after a restart | p50 < 20 ms | {percentile(flat, 0.5):.1f} /"
        f" {percentile(flat, 0.95):.1f} ms |"
    )
    print(
        f"| Results identical to the in-memory index's | all |"
        f" {'yes' if not warm['differ'] else 'NO'} ({warm['compared']} queries) |"
    )


def report_daemon(raw: int, daemons: dict[str, Any]) -> None:
    """The whole daemon's start (``daemon`` mode): figures, then the README's rows."""
    print("\nrestart of the whole daemon (`agentd serve`, mock model) on that home:")
    for label, figures in daemons.items():
        steps = ", ".join(
            f"{name.replace('_', ' ')} {seconds * 1000:.0f} ms"
            for name, seconds in sorted(figures["milestones_s"].items(), key=lambda i: i[1])
        )
        recall = figures["recall_after_first_answer"]
        print(
            f"  {label}: first answered search over the socket ({FIRST_QUERY.query},"
            f" {figures['first_hits']} hits) {figures['first_answer_s'] * 1000:.0f} ms after"
            f" the spawn (socket answering after {figures['socket_s'] * 1000:.0f} ms);"
            f" state then: {figures['state_at_first_answer']},"
            f" told: {figures['first_incomplete']}\n"
            f"    from the spawn: {steps}\n"
            f"    recall process then: VmRSS {mb(recall['VmRSS'])}"
            f" ({recall['VmRSS'] / raw:.2f}x raw), RssAnon {mb(recall['RssAnon'])}"
            f" ({recall['RssAnon'] / raw:.2f}x), RssFile {mb(recall['RssFile'])};"
            f" daemon VmRSS {mb(figures['daemon_after_first_answer']['VmRSS'])}"
        )
        after = figures["recall_after_queries"]
        flat = figures["times_ms"]
        print(
            f"    {len(flat)} queries over the socket once ready: p50"
            f" {percentile(flat, 0.5):.1f} ms, p95 {percentile(flat, 0.95):.1f} ms;"
            f" identical to the in-memory index's: {'yes' if not figures['differ'] else 'NO'};"
            f" recall process after them: RssAnon {mb(after['RssAnon'])}"
            f" ({after['RssAnon'] / raw:.2f}x raw), RssFile {mb(after['RssFile'])}"
        )
        for line in figures["differ"]:
            print(f"      differs: {line}")
    print("\n| Daemon restart, persisted index | Target | Result |\n|---|---|---|")
    for label, figures in daemons.items():
        recall = figures["recall_after_first_answer"]
        print(
            f"| `agentd serve` spawn to first answered search ({label}) | < 1 s |"
            f" {figures['first_answer_s'] * 1000:.0f} ms, state"
            f" `{figures['state_at_first_answer']}` |"
        )
        print(
            f"| Recall process RSS at the first answer ({label}) | ≤ 0.5× raw text |"
            f" {mb(recall['VmRSS'])}, {recall['VmRSS'] / raw:.2f}× (heap"
            f" {mb(recall['RssAnon'])}, {recall['RssAnon'] / raw:.2f}×; mapped pages"
            f" {mb(recall['RssFile'])}) |"
        )


def main() -> None:
    mode, home = sys.argv[1], Path(sys.argv[2])
    cold = "--cold" in sys.argv[3:]
    if mode == "persist":
        figures = persist(home)
    elif mode == "open":
        figures = open_(home)
    else:
        figures = daemon(home)
    out = home / f"bench-{mode}{'--cold' if cold else ''}.json"
    out.write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
