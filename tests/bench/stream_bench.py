"""Streaming benchmark: time to first token through agentctl's socket and through the
OpenAI-compatible endpoint against the provider's own, and the event loop's lag with 20
clients streaming from the endpoint at once. Prints figures; asserts nothing.

    python tests/bench/stream_bench.py [--turns 50] [--chunk-delay-s 0.02] [--pieces 20]
                                       [--clients 20] [--seconds 20]

The provider is the local OpenAI-compatible test server (tests/support/openai_server.py)
in a process of its own, streaming every answer in ``--pieces`` pieces with a fixed
``--chunk-delay-s`` before each: its own time to first token is that delay plus its HTTP.
The daemon runs in this process on a real litellm model pointed at it (the whole turn
path: lock, memory, prompt, litellm's stream, the events), beside a ticker that sleeps
10 ms and records how much later than that it woke (the loop's lag); the clients run in
another process, one turn at a time:

- *provider*: OpenAI's Python client straight to the test server, streaming; the time
  from sending the request to the first piece of text;
- *agentctl*: a ``chat`` request on the daemon's socket, as agentctl sends it (its
  :class:`~agentd.client.connection.Connection`), to the first ``assistant_delta`` event;
  and, for scale, ``agentctl chat -p`` as a process, from its start to the first byte of
  the reply on its stdout (Python's start-up included);
- *endpoint*: OpenAI's Python client to ``/v1/chat/completions`` with ``stream: true``,
  to the first piece of text.

Then *concurrent*: ``--clients`` clients (OpenAI's async client, each its own ``user``, so
each its own conversation) stream turns from the endpoint back to back for
``--seconds``, while the ticker runs.

Targets: time to first token through agentctl and through the endpoint within 20 ms of
the provider's own (p50); worst loop lag with 20 streaming clients under 50 ms (the
daemon's existing target, tests/bench/loop_bench.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the test server is under tests/
    sys.path.insert(0, str(ROOT))

from agentd.daemon.requests import AgentCreate  # noqa: E402
from agentd.daemon.server import Daemon  # noqa: E402
from shared.logging import configure  # noqa: E402
from shared.settings import Settings  # noqa: E402

TICK_S = 0.010
MODEL = "openai/bench-model"
WARM_UP_TURNS = 5


# --- the provider's process ----------------------------------------------------------------


def run_server(delay_s: float, pieces: int) -> None:
    """Serve the test server until stdin closes; print its URL first."""
    from tests.support.openai_server import (
        FakeOpenAIServer,
        ScriptedResponse,
        chat_completion,
        usage,
    )

    text = "".join(f"word{i:02d} " for i in range(pieces))
    body = chat_completion(text, usage=usage(800, pieces * 2))
    cut = [text[i : i + 7] for i in range(0, len(text), 7)]
    with FakeOpenAIServer(chunk_delay_s=delay_s) as server:
        server.default_response = ScriptedResponse(body=body, chunks=cut)
        print(server.url, flush=True)
        sys.stdin.read()


# --- the clients' process ------------------------------------------------------------------


def run_clients(config: dict[str, Any]) -> None:
    """Every client-side measurement, as JSON on the last line."""
    import openai

    from agentd.client.connection import Connection

    turns = config["turns"]
    messages = [{"role": "user", "content": "tell me something"}]

    def provider_ttft() -> float:
        client = openai.OpenAI(base_url=config["provider"], api_key="sk-bench", max_retries=0)
        started = time.perf_counter()
        stream = client.chat.completions.create(model="bench-model", messages=messages, stream=True)
        first = None
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - started
        client.close()
        assert first is not None
        return first

    def socket_ttft(connection: Connection) -> float:
        started = time.perf_counter()
        first = None
        for line in connection.call("chat", {"agent": "bench", "text": "tell me something"}):
            if first is None and line.get("event") == "assistant_delta":
                first = time.perf_counter() - started
            if "ok" in line:
                assert line["ok"], line
        assert first is not None
        return first

    def endpoint_ttft(client: openai.OpenAI) -> float:
        started = time.perf_counter()
        first = None
        stream = client.chat.completions.create(
            model="bench", messages=messages, stream=True, user="ttft"
        )
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - started
        assert first is not None
        return first

    def process_ttft() -> float:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentd.client",
                "chat",
                "-p",
                "tell me something",
                "-a",
                "bench",
            ],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        proc.stdout.read(1)
        first = time.perf_counter() - started
        proc.communicate()
        return first

    endpoint = openai.OpenAI(base_url=config["endpoint"], api_key=config["key"], max_retries=0)
    connection = Connection()
    results: dict[str, list[float]] = {"provider": [], "agentctl": [], "endpoint": []}
    for n in range(WARM_UP_TURNS + turns):  # interleaved, so load hits all three alike
        measured = (provider_ttft(), socket_ttft(connection), endpoint_ttft(endpoint))
        if n >= WARM_UP_TURNS:
            for name, value in zip(results, measured, strict=True):
                results[name].append(value)
    results["agentctl_process"] = [process_ttft() for _ in range(config["process_turns"])]
    connection.close()
    endpoint.close()
    results |= asyncio.run(_concurrent(config))
    print(json.dumps(results))


async def _concurrent(config: dict[str, Any]) -> dict[str, Any]:
    import openai

    deadline = time.monotonic() + config["seconds"]
    ttft: list[float] = []
    turn_s: list[float] = []
    pieces = 0
    errors: list[str] = []

    async def client(n: int) -> None:
        nonlocal pieces
        api = openai.AsyncOpenAI(base_url=config["endpoint"], api_key=config["key"], max_retries=0)
        async with api:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                first = None
                try:
                    stream = await api.chat.completions.create(
                        model="bench",
                        messages=[{"role": "user", "content": f"client {n} asks"}],
                        stream=True,
                        user=f"client-{n}",
                    )
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            pieces += 1
                            if pieces == 1:  # all are streaming: the daemon starts counting
                                print("concurrent", flush=True)
                            if first is None:
                                first = time.perf_counter() - started
                except openai.APIError as exc:
                    errors.append(repr(exc))
                    continue
                turn_s.append(time.perf_counter() - started)
                if first is not None:
                    ttft.append(first)

    await asyncio.gather(*(client(n) for n in range(config["clients"])))
    return {
        "concurrent_ttft": ttft,
        "concurrent_turns": turn_s,
        "pieces": pieces,
        "errors": errors[:5],
    }


# --- the daemon side -----------------------------------------------------------------------


class Ticker:
    def __init__(self) -> None:
        self.lags: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(TICK_S)
            self.lags.append(loop.time() - started - TICK_S)


async def bench(args: argparse.Namespace, home: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, __file__, "--run-server", str(args.chunk_delay_s), str(args.pieces)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    provider_url = server.stdout.readline().strip()
    settings = Settings(
        home=home,
        model=MODEL,
        api_base=provider_url,
        api_key="sk-bench",
        context_window=128_000,
        web="127.0.0.1:0",
        block_remote_models=True,
    )
    daemon = Daemon(settings)
    ready = asyncio.Event()
    serving = asyncio.create_task(daemon.serve(ready=ready))
    await ready.wait()
    await daemon.agents.create(AgentCreate(name="bench"))
    _, key = daemon.handlers.api_keys.create("bench")
    config = {
        "provider": provider_url,
        "endpoint": daemon.web.api_base,
        "key": key,
        "turns": args.turns,
        "process_turns": args.process_turns,
        "clients": args.clients,
        "seconds": args.seconds,
    }
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    env = {**os.environ, "AGENTD_HOME": str(home)}
    clients = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--run-clients",
        json.dumps(config),
        env=env,
        stdout=subprocess.PIPE,
    )
    assert clients.stdout is not None
    last = b""
    collections = upto = 0
    while line := await clients.stdout.readline():
        if line.strip() == b"concurrent":
            ticker.lags.clear()
            collections = len(daemon.quiet_collection.collections)
        last = line
        upto = len(daemon.quiet_collection.collections)
    await clients.wait()
    lags = sorted(ticker.lags)
    during = list(daemon.quiet_collection.collections)[collections:upto]
    ticking.cancel()
    daemon.request_shutdown()
    await serving
    server.stdin.close()
    server.wait(10)
    report(json.loads(last), lags, during, args)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def report(
    results: dict[str, Any], lags: list[float], collections: list[str], args: argparse.Namespace
) -> None:
    load = os.getloadavg()
    print(
        f"\nprovider: the test server, {args.pieces} pieces, {args.chunk_delay_s * 1000:.0f} ms "
        f"before each; {args.turns} turns per path (after {WARM_UP_TURNS} to warm up); "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    own = _pct(results["provider"], 0.5)
    for name in ("provider", "agentctl", "endpoint", "agentctl_process"):
        values = results[name]
        p50 = _pct(values, 0.5)
        extra = "" if name == "provider" else f"  overhead p50 {1000 * (p50 - own):+6.1f} ms"
        print(
            f"  time to first token, {name:>16}: p50 {p50 * 1000:6.1f} ms, "
            f"p90 {_pct(values, 0.9) * 1000:6.1f} ms, min {min(values) * 1000:6.1f} ms{extra}"
        )
    ttft, turns = results["concurrent_ttft"], results["concurrent_turns"]
    print(
        f"  {args.clients} concurrent streaming clients for {args.seconds:.0f} s: "
        f"{len(turns)} turns, {results['pieces']} pieces; "
        f"first token p50 {_pct(ttft, 0.5) * 1000:.1f} ms, "
        f"p99 {_pct(ttft, 0.99) * 1000:.1f} ms; turn p50 {_pct(turns, 0.5) * 1000:.0f} ms"
    )
    print(
        f"  loop lag meanwhile: worst {lags[-1] * 1000:.1f} ms, "
        f"p99 {_pct(lags, 0.99) * 1000:.1f} ms, mean {statistics.fmean(lags) * 1000:.2f} ms "
        f"({len(lags)} ticks; target worst < 50 ms); the daemon's full collections "
        f"meanwhile: {', '.join(collections) or 'none'}"
    )
    for error in results["errors"]:
        print(f"  client error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--process-turns", type=int, default=10)
    parser.add_argument("--chunk-delay-s", type=float, default=0.02)
    parser.add_argument("--pieces", type=int, default=20)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--run-server", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--run-clients", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure("bench", level="WARNING")
    if args.run_server:
        run_server(float(args.run_server[0]), int(args.run_server[1]))
        return
    if args.run_clients:
        run_clients(json.loads(args.run_clients))
        return
    home = Path(tempfile.mkdtemp(prefix="agentd-sb-", dir="/tmp"))
    try:
        asyncio.run(bench(args, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
