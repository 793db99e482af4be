"""Turn benchmark: harness time per mock turn with short and very long histories, the
``agentctl status`` round trip, and daemon start-up time. Prints figures; asserts nothing.

    python tests/bench/turn_bench.py [--turns 200] [--history 100 100000]

"Harness time" is a whole chat turn through the daemon's turn path (lock, memory HEAD
check, prompt, request shaping, persistence with fsync, context replace, recall indexing,
the post-turn reflection check) minus the time spent inside the model. Targets: under
5 ms, and the long-history figure within 1.5× of the short one (a turn must not read
history it does not need).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentd.daemon.agents import Agents
from agentd.daemon.requests import AgentCreate
from agentd.daemon.turns import Turns
from agentd.recall.service import RecallService
from agentd.reflection.reflections import Reflections
from shared.coordination.broker import locate
from shared.ids import new_id
from shared.logging import configure
from shared.models.events import Event
from shared.models.messages import Message
from shared.providers.base import ModelRequest, ModelResponse
from shared.providers.factory import ProviderFactory
from shared.providers.mock import MockProvider
from shared.settings import Settings
from shared.store.layout import Layout

CONTEXT_MESSAGES = 40
"""How many of the old messages are still in the window (the rest were compacted away)."""


class TimedMock(MockProvider):
    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        start = time.perf_counter()
        try:
            return await super().complete(request)
        finally:
            self.seconds += time.perf_counter() - start


class OneProvider(ProviderFactory):
    def __init__(self, settings: Settings, provider: TimedMock) -> None:
        super().__init__(settings)
        self.provider = provider

    def get(self, model: str | None = None, context_window: int | None = None) -> TimedMock:
        return self.provider


def _write_history(layout: Layout, agent_id: str, conversation_id: str, count: int) -> None:
    directory = layout.conversation_dir(agent_id, conversation_id)
    ids = []
    with open(directory / "messages.jsonl", "ab") as log:
        for i in range(count):
            role = "user" if i % 2 == 0 else "assistant"
            text = f"历史消息 {i}: we talked about topic {i % 97} and 数据库端口 {5000 + i % 50}."
            message = Message.of(
                id=new_id("msg"),
                agent_id=agent_id,
                conversation_id=conversation_id,
                role=role,
                content=text,
            )
            ids.append(message.id)
            log.write(message.to_line())
    context = {"schema_version": 1, "message_ids": ids[-CONTEXT_MESSAGES:]}
    (directory / "context.json").write_text(json.dumps(context))


async def _measure(history: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as home:
        settings = Settings(home=Path(home))
        layout = Layout(settings.home)
        setup = Agents(layout)
        agent = await setup.create(AgentCreate(name="bench"))
        assert agent.default_conversation_id
        _write_history(layout, agent.id, agent.default_conversation_id, history)
        setup.close()

        mock = TimedMock()
        recall = RecallService(layout)
        agents = Agents(layout, on_append=recall.on_append)
        recall.start([agent.id]).join()
        runner = Turns(settings, layout, OneProvider(settings, mock), recall)
        reflections = Reflections(settings, layout, locate(settings), agents.store)

        async def emit(_event: Event) -> None:
            return None

        open_start = time.perf_counter()
        conversation = agents.conversation(agent, None)
        open_ms = (time.perf_counter() - open_start) * 1000
        repo = agents.memory(agent.id)
        warm_up = await runner.chat(agent, repo, conversation, "warm up", emit)
        await reflections.after_turn(agent, conversation, warm_up)  # builds its state once
        samples = []
        for i in range(turns):
            mock.seconds = 0.0
            start = time.perf_counter()
            text = f"turn {i}: 我更喜欢用 tabs 缩进"
            result = await runner.chat(agent, repo, conversation, text, emit)
            await reflections.after_turn(agent, conversation, result)
            samples.append((time.perf_counter() - start - mock.seconds) * 1000)
        agents.close()
    samples.sort()
    return {
        "history": history,
        "open_ms": open_ms,
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(len(samples) * 0.95) - 1],
        "mean_ms": statistics.fmean(samples),
    }


def _status_round_trip(runs: int) -> tuple[float, float]:
    """Median ms of ``agentctl status`` as a process, and daemon start-to-ready ms."""
    with tempfile.TemporaryDirectory(prefix="agentd-bench-", dir="/tmp") as home:
        env = {**os.environ, "AGENTD_HOME": home, "AGENTD_MODEL": "mock"}
        status = [sys.executable, "-m", "agentd.client", "status"]
        start = time.perf_counter()
        daemon = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while subprocess.run(status, env=env, capture_output=True).returncode != 0:
                time.sleep(0.01)
            ready_ms = (time.perf_counter() - start) * 1000
            samples = []
            for _ in range(runs):
                t0 = time.perf_counter()
                subprocess.run(status, env=env, capture_output=True, check=True)
                samples.append((time.perf_counter() - t0) * 1000)
        finally:
            daemon.terminate()
            daemon.wait(10)
    return statistics.median(samples), ready_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--history", type=int, nargs="+", default=[100, 100_000])
    args = parser.parse_args()
    configure("bench", level="WARNING")

    results = [asyncio.run(_measure(h, args.turns)) for h in args.history]
    print(
        f"harness time per mock turn ({args.turns} turns, {CONTEXT_MESSAGES} old messages "
        "in context):"
    )
    for r in results:
        print(
            f"  history {r['history']:>9,}: p50 {r['p50_ms']:.2f} ms  p95 {r['p95_ms']:.2f} ms"
            f"  mean {r['mean_ms']:.2f} ms  (open conversation {r['open_ms']:.1f} ms)"
        )
    if len(results) >= 2:
        ratio = results[-1]["p50_ms"] / results[0]["p50_ms"]
        print(
            f"  ratio p50 {results[-1]['history']:,} / {results[0]['history']:,}: {ratio:.2f}×"
            "  (target ≤ 1.5×)"
        )
    status_ms, ready_ms = _status_round_trip(20)
    print(f"agentctl status round trip (process start to exit, median of 20): {status_ms:.1f} ms")
    print(f"daemon start to first answered status (mock model): {ready_ms:.0f} ms")


if __name__ == "__main__":
    main()
