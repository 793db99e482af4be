"""The token estimate learns from the provider, so a tokenizer that counts more than four
characters a token (every one does for Chinese) no longer makes compaction run every turn.

The end-to-end test runs the daemon on a real litellm model against a local
OpenAI-compatible server whose ``prompt_tokens`` are 1.4× our estimate of each request.
Its window is 1,400, not the 1,200 of the seed walkthrough: at 1.4× the daemon's system
prompt and tool schemas alone are ~912 of the 960 tokens a 1,200 window may fill before
its reply reserve, less room than one compaction summary takes, so no policy can avoid
compacting every turn there. At 1,400 the old estimate still compacts on 7 of 20 turns.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from shared.context.budget import COMFORTABLE_ROOM_TOKENS, compaction_threshold, measure
from shared.context.calibration import MAX_RATIO, TokenRatio, TokenRatioStore
from shared.models.messages import Message
from shared.models.text import text_chars
from shared.providers.base import ModelRequest
from shared.providers.tokens import CHARS_PER_TOKEN
from tests.support.daemon import DaemonRunner
from tests.support.openai_server import (
    FakeOpenAIServer,
    ScriptedResponse,
    chat_completion,
    usage,
)

pytestmark = pytest.mark.slow  # imports litellm: seconds of CPU in each worker

REPORTED_RATIO = 1.4
TOPIC = "今天天气不错。" * 7


class DenseTokenizerServer(FakeOpenAIServer):
    """Answers every request, reporting 1.4× our chars/4 estimate of it as prompt tokens."""

    def _next_response(
        self, request_body: dict[str, Any], authorization: str | None
    ) -> ScriptedResponse:
        with self._lock:
            self.requests.append(request_body)
            self.authorizations.append(authorization)
        prompt = int(_estimate(request_body) * REPORTED_RATIO)
        return ScriptedResponse(body=chat_completion("好的。", usage=usage(prompt, 3)))


def _estimate(body: dict[str, Any]) -> int:
    """Our estimate (shared.providers.tokens) of a request, from its OpenAI form."""
    total = 0
    for message in body["messages"]:
        chars = text_chars(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            function = call["function"]
            chars += text_chars(function["name"]) + text_chars(function["arguments"])
        total += math.ceil(chars / CHARS_PER_TOKEN)
    tools = json.dumps(body.get("tools") or [], separators=(",", ":"), ensure_ascii=False)
    return total + (math.ceil(text_chars(tools) / CHARS_PER_TOKEN) if body.get("tools") else 0)


@pytest.fixture
def dense_server() -> Any:
    with DenseTokenizerServer() as server:
        yield server


@pytest.mark.sdk  # imports litellm
def test_twenty_turns_on_a_dense_tokenizer_compact_at_most_four_times_and_it_is_remembered(
    daemon: DaemonRunner, dense_server: FakeOpenAIServer, agentd_home: Path
) -> None:
    settings = {
        "model": "openai/test-model",
        "api_base": dense_server.url,
        "api_key": "sk-test",
        "context_window": 1400,
    }
    daemon.start(**settings)
    compactions = []
    warnings = []
    for n in range(1, 21):
        lines = daemon.call("chat", {"text": f"第 {n} 个无关话题：{TOPIC}"})
        assert lines[-1]["result"]["stop_reason"] == "end_turn"
        compactions += [line["data"] for line in lines if line.get("event") == "compaction"]
        warnings += [line["data"] for line in lines if line.get("event") == "warning"]

    assert 1 <= len(compactions) <= 4
    assert not [w for w in warnings if w["code"] == "context_window_cramped"]
    assert all(c["tokens_after"] <= c["threshold"] for c in compactions)
    assert daemon.result("context.show")["token_ratio"] == pytest.approx(REPORTED_RATIO, abs=0.02)

    daemon.stop()
    daemon.start(**settings)
    assert daemon.result("context.show")["token_ratio"] == pytest.approx(REPORTED_RATIO, abs=0.02)


@pytest.mark.sdk  # imports litellm
def test_a_window_the_prompt_nearly_fills_is_named_once_with_a_window_that_has_room(
    daemon: DaemonRunner, dense_server: FakeOpenAIServer
) -> None:
    """At 1,200 every turn must compact whatever the policy: the user is told so, once,
    as soon as the learned ratio shows it (the second turn), with a window that fits."""
    daemon.start(
        model="openai/test-model",
        api_base=dense_server.url,
        api_key="sk-test",
        context_window=1200,
    )
    cramped = []
    for n in range(1, 5):
        lines = daemon.call("chat", {"text": f"第 {n} 个无关话题：{TOPIC}"})
        cramped += [
            line["data"]["message"]
            for line in lines
            if line.get("event") == "warning" and line["data"]["code"] == "context_window_cramped"
        ]

    assert len(cramped) == 1
    assert "AGENTD_CONTEXT_WINDOW" in cramped[0]
    suggested = int(re.search(r"to ([\d,]+) or more", cramped[0]).group(1).replace(",", ""))
    floor = daemon.result("context.show")["floor"]
    assert compaction_threshold(suggested) - floor >= COMFORTABLE_ROOM_TOKENS


def test_memory_that_grows_into_the_window_is_named_on_the_next_turn(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    """The floor is measured again when memory moves: a window with room on the first turn
    becomes cramped once a commit grows the system prompt, and the next turn says so."""
    daemon.start(context_window=1000)  # the mock model: the ratio stays 1.0
    first = daemon.call("chat", {"text": "hello"})
    assert not [line for line in first if line.get("event") == "warning"]

    memory_dir = Path(daemon.result("memory.path")["path"])
    (memory_dir / "system" / "human.md").write_text(
        "---\nname: human\ndescription: What I know about the user.\n---\n"
        + "- the user keeps long notes about every project\n" * 12
    )
    daemon.result("memory.commit", {"message": "a long memory"})
    later = daemon.call("chat", {"text": "hello again"})

    cramped = [
        line["data"]
        for line in later
        if line.get("event") == "warning" and line["data"]["code"] == "context_window_cramped"
    ]
    assert len(cramped) == 1


# --- learning ----------------------------------------------------------------------------


def test_the_first_sample_replaces_the_guess_and_later_ones_move_it_a_third_of_the_way() -> None:
    first = TokenRatio().learn(estimated=1000, reported=1400)
    second = first.learn(estimated=1000, reported=2000)

    assert (first.ratio, first.samples) == (1.4, 1)
    assert (second.ratio, second.samples) == (1.6, 2)


@pytest.mark.parametrize(("reported", "ratio"), [(500, 1.0), (9000, MAX_RATIO)])
def test_the_ratio_is_never_learned_below_the_estimate_nor_above_a_token_a_character(
    reported: int, ratio: float
) -> None:
    assert TokenRatio().learn(estimated=1000, reported=reported).ratio == ratio


def test_ratios_are_kept_per_model_and_survive_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "token-ratios.json"
    store = TokenRatioStore(path)

    asyncio.run(store.observe("openai/a", estimated=1000, reported=2000))
    asyncio.run(store.observe("openai/b", estimated=10, reported=40))  # too small to tell

    reread = TokenRatioStore(path)
    assert (reread.ratio("openai/a"), reread.ratio("openai/b")) == (2.0, 1.0)


def test_an_unreadable_ratio_file_is_learned_again_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "token-ratios.json"
    path.write_text("{not json")

    store = TokenRatioStore(path)
    asyncio.run(store.observe("openai/a", estimated=1000, reported=1500))

    assert TokenRatioStore(path).ratio("openai/a") == 1.5


def test_the_budget_multiplies_every_estimate_by_the_ratio() -> None:
    message = Message.of(id="m", agent_id="a", conversation_id="c", role="user", content="x" * 400)
    request = ModelRequest(system="s" * 400, messages=[message])

    plain, dense = measure(request, 10_000), measure(request, 10_000, token_ratio=1.5)

    assert (plain.floor, plain.request_tokens) == (100, 200)
    assert (dense.floor, dense.request_tokens, dense.token_ratio) == (150, 300, 1.5)
