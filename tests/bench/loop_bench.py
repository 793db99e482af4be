"""Event-loop benchmark: how late the daemon's loop runs while everything happens at once.
Prints figures; asserts nothing.

    python tests/bench/loop_bench.py [--search-messages 1000000] [--worker-messages 100000]
                                     [--clients 20] [--searchers 5] [--seconds 20]
                                     [--model-latency-s 0.05]

The daemon runs in this process, on this event loop, beside a ticker that sleeps 10 ms
and records how much later than that it woke: the loop's lag, which every agent and
connection feels. Two phases of ``--seconds`` each, with the clients in another process:

- *idle*: 20 clients chat back to back, each on its own conversation (the mock model,
  answering after ``--model-latency-s``, 50 ms by default: a model never answers at once);
- *loaded*: the same 20 clients, while 5 more run recall searches back to back over an
  agent of 1,000,000 messages, and a worker process advances the reflection state of the
  first client's conversation (100,000 messages of history), as a reflection job does:
  select the unreflected slice, then ``advance`` over it, again and again.

Targets: worst lag under load < 50 ms; chat p99 under load < 3× its idle p99.

Measured on the 2-core development VM with the defaults. "before" is the commit before
issue 11 (3d40da3); "loop freed" is after the blocking calls left the loop (7e4c7de);
"priority" adds background priority for recall's threads and the workers, a 1 ms
interpreter-lock switch interval and ``gc.freeze`` once the daemon is ready
(``shared/priority.py``), three runs on a quiet machine; "recall process" runs recall in
a process of its own (``agentd/recall/process.py``) and gives each phase its own
conversations, three runs on a quiet machine (runs beside other engineers' benchmarks and
tests reached 90-190 ms worst under load); "GC by hand" makes full garbage collections
the daemon's own (``agentd/daemon/garbage_collection.py``) and trims what each turn costs the loop,
five runs on a quiet machine:

| stage | lag idle: worst / p99 | lag loaded: worst / p99 | chat p99 ratio | turns idle/loaded |
|---|---|---|---|---|
| before | 1,652 / 855 ms | 1,923 / 858 ms | 2,156 / 2,133 ms | 856 / 676 |
| loop freed | 61 / 20 ms | 80 / 63 ms | 1.98× | 2,835 / 1,347 |
| priority | 18–33 / 11–14 ms | 56–87 / 41–48 ms | 1.34–2.16× | 2,404–3,131 / 1,382–1,822 |
| recall process | 23–75 / 17–20 ms | 45–57 / 23–24 ms | 1.09–1.91× | 2,995–3,431 / 2,624–3,031 |
| GC by hand | 9–20 / 7–11 ms | 16–23 / 11–15 ms | 0.83–1.88× | 3,822–4,614 / 3,431–4,097 |

Before, every fsync of every turn ran on the loop, a turn waited on the loop
(``time.sleep``) for the state lock a worker held while it parsed 100,000 messages, and an
index append waited for a running search. In the daemon's process the searches then
still shared the interpreter lock with the loop: each time the loop gave the lock up for a
socket or file call it waited for a search thread to hand it back, whatever that thread's
priority. With recall in its own process the loaded p99 fell by half, and the worst tick
of a loaded phase came to 45, 53 and 57 ms in three quiet runs: at the target, not
reliably under it.

What was left was two things. The worst ticks were garbage collection: a callback probe
found full collections of 45-47 ms in the loaded phase, walking the ~35,000 objects of the
20 growing windows; full collections now run only when the daemon has been quiet for a
second, or once five minutes have passed without one. And each turn cost the loop about
3 ms: the window's token estimate counted every message again four times (now kept on each
message and schema), memory's HEAD was read three times (now once for a one-step turn),
``context.json`` was replaced (an fsync and a rename in a thread, whose return the loop
waits on) after every append instead of once a turn, and a send waited on ``drain`` even
when the line went out whole. Alternating runs of the commit before these changes
(a2f8698) and after them, on one machine in one hour: loaded worst 39.5 and 45.5 ms
against 22.9 and 20.2 ms; loaded p99 18.1 and 29.4 ms against 13.0 and 12.3 ms; turns in
the loaded phase 2,851 and 2,645 against 3,580 and 3,788. Runs on this VM vary by 2× with
what else runs on it.

The corpus is written straight to ``messages.jsonl`` (short generated messages, half of
them Chinese), which takes seconds; the daemon then builds its recall index from it at
start, as it would after a restart (under a minute at 1,000,000 messages this short).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    from agentd.daemon.agents import Agents
except ModuleNotFoundError:  # run as a script: the repository root is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from agentd.daemon.agents import Agents

from agentd.client import Connection
from agentd.daemon.requests import AgentCreate
from agentd.daemon.server import Daemon
from shared.ids import new_id
from shared.logging import configure
from shared.priority import lower_this_thread
from shared.recall.ranking import SearchRequest
from shared.reflection.slices import select_slice
from shared.reflection.state import advance, load_state
from shared.settings import Settings
from shared.store.layout import Layout

TICK_S = 0.010
SEARCH_CONVERSATIONS = 200
CONTEXT_MESSAGES = 40
"""Ids listed in a long conversation's ``context.json`` (the rest were compacted away)."""

EN = [
    "the",
    "deploy",
    "key",
    "server",
    "config",
    "database",
    "timeout",
    "error",
    "test",
    "build",
    "staging",
    "vault",
    "port",
    "cache",
    "queue",
    "index",
    "query",
    "search",
    "result",
    "memory",
    "disk",
    "process",
    "thread",
    "retry",
    "connection",
    "refused",
    "branch",
    "commit",
    "merge",
    "review",
    "request",
    "response",
    "client",
    "service",
    "endpoint",
    "token",
    "session",
    "file",
    "path",
    "name",
    "value",
    "return",
    "update",
    "change",
    "fix",
    "check",
    "run",
    "start",
    "stop",
]
ZH = [
    "数据库",
    "端口",
    "配置",
    "部署",
    "服务器",
    "测试",
    "日志",
    "用户",
    "项目",
    "功能",
    "接口",
    "客户端",
    "网络",
    "性能",
    "内存",
    "磁盘",
    "进程",
    "线程",
    "请求",
    "响应",
    "结果",
    "参数",
    "变量",
    "函数",
    "模块",
    "目录",
    "路径",
    "密码",
    "账号",
    "权限",
    "安全",
    "环境",
    "生产",
    "开发",
    "分支",
    "提交",
    "合并",
    "修改",
    "更新",
    "删除",
    "创建",
    "检查",
    "运行",
    "启动",
    "停止",
    "重启",
    "备份",
    "恢复",
    "监控",
    "告警",
    "超时",
    "失败",
    "成功",
]
QUERIES = (
    "deploy key",
    "数据库端口",
    "staging vault",
    "connection refused",
    "配置文件",
    "timeout retry",
    '"database port"',
    "备份 恢复",
)


# --- the corpus ----------------------------------------------------------------------------


def _text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "".join(rng.choices(ZH, k=rng.randint(4, 12))) + "。"
    return " ".join(rng.choices(EN, k=rng.randint(6, 20))) + "."


def write_log(path: Path, agent_id: str, conversation_id: str, count: int, seed: int) -> list[str]:
    """Append ``count`` alternating user/assistant messages; their ids, oldest first."""
    rng = random.Random(seed)
    stamp = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    ids = []
    lines = []
    head = f'"agent_id":"{agent_id}","conversation_id":"{conversation_id}"'
    for i in range(count):
        message_id = new_id("msg")
        ids.append(message_id)
        created = datetime.fromtimestamp(stamp + i * 7, UTC).isoformat().replace("+00:00", "Z")
        role = "user" if i % 2 == 0 else "assistant"
        content = json.dumps(_text(rng), ensure_ascii=False)
        lines.append(
            f'{{"id":"{message_id}",{head},"role":"{role}","content":{content},'
            f'"created_at":"{created}"}}\n'
        )
    with open(path, "a", encoding="utf-8") as log:
        log.writelines(lines)
    return ids


async def prepare(home: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The searcher (1M messages), the chatter (20 conversations, the first one long)."""
    layout = Layout(home)
    agents = Agents(layout)
    searcher = await agents.create(AgentCreate(name="searcher"))
    chatter = await agents.create(AgentCreate(name="chatter"))
    per_conversation = args.search_messages // SEARCH_CONVERSATIONS
    for n in range(SEARCH_CONVERSATIONS):
        conversation = agents.new_conversation(searcher)
        write_log(conversation.log.path, searcher.id, conversation.id, per_conversation, n)
    long = agents.conversation(chatter, None)
    # Each phase chats on conversations of its own (but the long one): windows grow with
    # every turn, and a phase run on the windows the one before it grew would be slower
    # for that alone.
    phases = {
        name: [long.id] + [agents.new_conversation(chatter).id for _ in range(args.clients - 1)]
        for name in ("idle", "loaded")
    }
    ids = write_log(long.log.path, chatter.id, long.id, args.worker_messages, 10_000)
    context = {"schema_version": 1, "message_ids": ids[-CONTEXT_MESSAGES:]}
    (long.directory / "context.json").write_text(json.dumps(context))
    load_state(long.directory)  # derived from the log once, as after the first turn
    agents.close()
    return {
        "searcher": searcher.id,
        "chatter": chatter.id,
        "phases": phases,
        "worker_dir": str(long.directory),
    }


# --- the other processes -------------------------------------------------------------------


def run_clients(config: dict[str, Any]) -> None:
    """Chat (and search) back to back until the deadline; print the latencies as JSON."""
    deadline = time.monotonic() + config["seconds"]
    chat: list[float] = []
    advanced: list[float] = []
    """Turns of the first conversation, the one the worker advances."""
    search: list[float] = []
    errors: list[str] = []

    def chatting(conversation_id: str) -> None:
        connection = Connection()
        n = 0
        while time.monotonic() < deadline:
            n += 1
            started = time.perf_counter()
            try:
                connection.result(
                    "chat",
                    {
                        "agent": config["chatter"],
                        "conversation": conversation_id,
                        "text": f"message {n}: the deploy key is in vault path {n}",
                    },
                )
            except Exception as exc:  # reported, not fatal: the figures say how many
                errors.append(repr(exc))
                continue
            took = time.perf_counter() - started
            chat.append(took)
            if conversation_id == config["conversations"][0]:
                advanced.append(took)
        connection.close()

    def searching(k: int) -> None:
        connection = Connection()
        n = k
        while time.monotonic() < deadline:
            n += 1
            started = time.perf_counter()
            params = {"agent": config["searcher"], "query": QUERIES[n % len(QUERIES)]}
            try:
                connection.result("recall.search", params)
            except Exception as exc:
                errors.append(repr(exc))
                continue
            search.append(time.perf_counter() - started)
        connection.close()

    threads = [threading.Thread(target=chatting, args=(c,)) for c in config["conversations"]]
    threads += [threading.Thread(target=searching, args=(k,)) for k in range(config["searchers"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {"chat": chat, "advanced": advanced, "search": search, "errors": errors[:5]}
    print(json.dumps(result))


def run_worker(directory: Path, seconds: float) -> None:
    """What a reflection job does to the state of its conversation, again and again, at
    the priority a reflection worker runs at."""
    lower_this_thread()
    deadline = time.monotonic() + seconds
    durations: list[float] = []
    log_path = directory / "messages.jsonl"
    while time.monotonic() < deadline:
        state = load_state(directory)
        found = select_slice(log_path, state.watermark, until_offset=log_path.stat().st_size)
        if found is None:
            time.sleep(0.05)
            continue
        started = time.perf_counter()
        advance(directory, found)
        durations.append(time.perf_counter() - started)
    print(json.dumps({"advances": durations}))


# --- the daemon side -----------------------------------------------------------------------


class Ticker:
    """A task that sleeps ``TICK_S`` again and again and records how late it woke."""

    def __init__(self) -> None:
        self.lags: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(TICK_S)
            self.lags.append(loop.time() - started - TICK_S)


async def _child(*argv: str, env: dict[str, str]) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, *argv, env=env, stdout=subprocess.PIPE
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited with {process.returncode}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def phase(
    ticker: Ticker, config: dict[str, Any], env: dict[str, str], *, loaded: bool
) -> dict[str, Any]:
    clients = {**config, "searchers": config["searchers"] if loaded else 0}
    ticker.lags.clear()
    children = [_child("--run-clients", json.dumps(clients), env=env)]
    if loaded:
        children.append(
            _child("--run-worker", config["worker_dir"], str(config["seconds"]), env=env)
        )
    results = await asyncio.gather(*children)
    lags = sorted(ticker.lags)
    return {
        "lag_worst_ms": lags[-1] * 1000,
        "lag_p99_ms": _pct(lags, 0.99) * 1000,
        "ticks": len(lags),
        **results[0],
        "advances": results[1]["advances"] if loaded else [],
    }


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


async def bench(args: argparse.Namespace, home: Path) -> None:
    started = time.perf_counter()
    config = await prepare(home, args)
    print(f"corpus written in {time.perf_counter() - started:.0f} s", flush=True)
    settings = Settings(home=home, model="mock", mock_latency_s=args.model_latency_s)
    daemon = Daemon(settings)
    ready = asyncio.Event()
    serving = asyncio.create_task(daemon.serve(ready=ready))
    await ready.wait()
    started = time.perf_counter()
    for agent_id in (config["searcher"], config["chatter"]):
        while (await daemon.recall.status(agent_id))["state"] != "ready":  # answers before
            await asyncio.sleep(0.5)
        await daemon.recall.search(agent_id, SearchRequest(query="warm up"))
    print(f"recall index built in {time.perf_counter() - started:.0f} s", flush=True)

    env = {**os.environ, "AGENTD_HOME": str(home)}
    config |= {"seconds": args.seconds, "searchers": args.searchers}
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    everyone = sorted({c for conversations in config["phases"].values() for c in conversations})
    warm_up = {**config, "seconds": 2, "conversations": everyone}
    await phase(ticker, warm_up, env, loaded=False)  # opens every conversation
    for_phase = {name: {**config, "conversations": c} for name, c in config["phases"].items()}
    idle = await phase(ticker, for_phase["idle"], env, loaded=False)
    loaded = await phase(ticker, for_phase["loaded"], env, loaded=True)
    ticking.cancel()
    daemon.request_shutdown()
    await serving
    report(idle, loaded, args)


def report(idle: dict[str, Any], loaded: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\n{args.clients} chat clients (mock model, {args.model_latency_s * 1000:.0f} ms), "
        f"{args.searchers} searchers over {args.search_messages:,} messages, a worker "
        f"advancing a {args.worker_messages:,}-message conversation; {args.seconds:.0f} s a phase"
    )
    for name, result in (("idle", idle), ("loaded", loaded)):
        chat = result["chat"]
        print(
            f"  {name:>6}: loop lag worst {result['lag_worst_ms']:7.1f} ms, "
            f"p99 {result['lag_p99_ms']:6.1f} ms ({result['ticks']} ticks); "
            f"chat p50 {_pct(chat, 0.5) * 1000:6.1f} ms, p99 {_pct(chat, 0.99) * 1000:7.1f} ms "
            f"({len(chat)} turns)"
        )
    for name, result in (("idle", idle), ("loaded", loaded)):
        turns = result["advanced"]
        print(
            f"  {name:>6}: chat on the conversation the worker advances: "
            f"p50 {_pct(turns, 0.5) * 1000:.1f} ms, p99 {_pct(turns, 0.99) * 1000:.1f} ms "
            f"({len(turns)} turns)"
        )
    search, advances = loaded["search"], loaded["advances"]
    if search:
        print(
            f"  searches: {len(search)}, p50 {_pct(search, 0.5) * 1000:.1f} ms, "
            f"p99 {_pct(search, 0.99) * 1000:.1f} ms"
        )
    if advances:
        print(
            f"  worker advances: {len(advances)}, mean {statistics.fmean(advances) * 1000:.0f} ms, "
            f"max {max(advances) * 1000:.0f} ms"
        )
    for result in (idle, loaded):
        for error in result["errors"]:
            print(f"  client error: {error}")
    ratio = _pct(loaded["chat"], 0.99) / _pct(idle["chat"], 0.99)
    print(
        f"  worst lag under load {loaded['lag_worst_ms']:.1f} ms (target < 50 ms); "
        f"chat p99 loaded/idle {ratio:.2f}× (target < 3×)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search-messages", type=int, default=1_000_000)
    parser.add_argument("--worker-messages", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--searchers", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--model-latency-s", type=float, default=0.05)
    parser.add_argument("--run-clients", help=argparse.SUPPRESS)
    parser.add_argument("--run-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure("bench", level="WARNING")
    if args.run_clients:
        run_clients(json.loads(args.run_clients))
        return
    if args.run_worker:
        run_worker(Path(args.run_worker[0]), float(args.run_worker[1]))
        return
    home = Path(tempfile.mkdtemp(prefix="agentd-lb-", dir="/tmp"))
    try:
        asyncio.run(bench(args, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
