"""Whatever a client sends as an op's parameters, a real daemon answers over the real
socket with a result or a typed error, never ``internal_error``, and keeps serving.

Two passes over every op but ``shutdown``: a sweep that gives each parameter, in turn,
every extreme value (huge, negative and non-finite numbers, wrong types, long strings,
NUL bytes, path-like ids, nested structures) while the others fit; then Hypothesis
mixing values and unknown keys at random (derandomized: the same examples every run).
Whatever a request changed is used at once (``context.show``, ``status``): a value the
daemon accepts is one it must live with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from agentd.daemon.ops import OPS as TABLE
from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
from shared.providers.mock import MOCK_MODEL
from tests.support.bounds import is_numeric
from tests.support.daemon import DaemonRunner

OPS = sorted(op for op in TABLE if op != "shutdown")
CHANGES_AN_AGENT = {"agent.create", "agent.update", "reflection.settings"}

NUMBERS = [-1, 0, 2**63, -(2**63), 10**400, 1e308, float("nan"), float("inf")]
EXTREMES: list[Any] = [
    *NUMBERS,
    True,
    None,
    "",
    "\x00",
    "a\x00b",
    "../../etc/passwd",
    "/etc/passwd",
    "a/b",
    "x" * 70,
    "x" * 200_000,
    [],
    {},
    [[[["deep"]]]],
    {"a": {"b": [1]}},
]


class MockForEveryModel(ProviderFactory):
    """Every model string gets the mock (litellm is never imported), each agent's own
    context window honoured: a window the daemon accepted is one it must live with."""

    def _make(self, model: str, window: int | None) -> Provider:
        return super()._make(MOCK_MODEL, window)


class Fuzzer:
    """One connection to a daemon with an agent that has chatted, the values that fit
    each parameter, and every ``internal_error`` seen."""

    def __init__(self, daemon: DaemonRunner) -> None:
        daemon.start(providers=MockForEveryModel, reflection_wait_s=0)
        answer = daemon.result("chat", {"text": "hello"})
        agent = daemon.result("agent.show")
        conversation, message = answer["conversation_id"], answer["message_ids"][0]
        self.fitting: dict[str, list[Any]] = {
            "agent": ["default", agent["id"]],
            "name": ["fuzzed", "default"],
            "model": ["mock"],
            "text": ["remember: tabs", "what do I prefer?"],
            "query": ["tabs", "prefer"],
            "message": ["notes by hand"],
            "conversation": [conversation],
            "conversations": [[conversation]],
            "message_id": [message],
            "before": [message, 2],
            "after": [message, 2],
            "limit": [1, 5],
            "order": ["asc", "desc"],
            "role": ["user", "assistant"],
            "since": ["2024-01-01"],
            "until": ["2099-12-31T00:00:00"],
            "trigger": ["off", "step-count"],
            "step_count": [3],
            "merge": ["auto", "explicit"],
            "recent": [1],
            "wait_s": [0],
            "path": ["system/human.md", "system"],
            "context_window": [50_000, 1_000_000],
        }
        self.human_md = Path(agent["memory_dir"]) / "system" / "human.md"
        self.connection = daemon.connect()
        self.crashes: list[tuple[str, str, str]] = []

    def fits(self, name: str) -> Any:
        return self.fitting.get(name, ["some text"])[0]

    def ask(self, op: str, params: Any) -> None:
        if op == "memory.commit":  # only hand edits give it something to commit
            with self.human_md.open("a") as notes:
                notes.write("- edited by hand\n")
        replies = [self._final(op, params)]
        if op in CHANGES_AN_AGENT and replies[0]["ok"]:
            agent_id = replies[0]["result"].get("id")
            replies += [self._final("context.show", {"agent": agent_id}), self._final("status", {})]
        for reply in replies:
            error = reply["error"] if not reply["ok"] else reply["result"].get("error") or {}
            if error.get("code") == "internal_error":
                self.crashes.append((op, repr(params)[:200], error["message"][:300]))

    def _final(self, op: str, params: Any) -> dict[str, Any]:
        line = json.dumps({"id": "f", "op": op, "params": params}).encode() + b"\n"
        self.connection.sock.sendall(line)
        for raw in self.connection.reader:
            message = json.loads(raw)
            if "ok" in message:
                return message
        raise AssertionError(f"the daemon hung up instead of answering {op} {params!r:.200}")


@pytest.fixture
def fuzzer(daemon: DaemonRunner) -> Fuzzer:
    return Fuzzer(daemon)


@pytest.mark.slow
def test_every_parameter_of_every_op_takes_every_extreme_value_in_its_stride(
    fuzzer: Fuzzer, daemon: DaemonRunner
) -> None:
    for op in OPS:
        fields = TABLE[op].params.model_fields
        required = {name: fuzzer.fits(name) for name, info in fields.items() if info.is_required()}
        fuzzer.ask(op, {**required, "unknown": 1})
        for name in fields:
            for value in EXTREMES:
                fuzzer.ask(op, {**required, name: value})

    assert fuzzer.crashes == []
    assert daemon.result("hello")["service"] == "agentd"


@pytest.mark.slow
def test_random_parameters_of_any_op_never_crash_the_daemon(
    fuzzer: Fuzzer, daemon: DaemonRunner
) -> None:
    @settings(
        max_examples=250,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_requests(fuzzer.fitting))
    def ask(op_and_params: tuple[str, Any]) -> None:
        fuzzer.ask(*op_and_params)

    ask()

    assert fuzzer.crashes == []
    assert daemon.result("hello")["service"] == "agentd"


def _requests(fitting: dict[str, list[Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    """An op and its params: its own fields with fitting values except one, which gets
    anything; or unknown keys; or params that are not an object at all."""
    known = [value for values in fitting.values() for value in values]
    anything = st.recursive(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=20),
            st.sampled_from(EXTREMES),
            st.sampled_from(known),
        ),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=6,
    )

    def fits(name: str) -> st.SearchStrategy[Any]:
        return st.sampled_from(fitting[name]) if name in fitting else st.text(min_size=1)

    def bad(info: FieldInfo) -> st.SearchStrategy[Any]:
        numbers = st.sampled_from(NUMBERS) | st.integers() if is_numeric(info) else st.nothing()
        return numbers | anything

    def one_bad(op: str, bad_name: str) -> st.SearchStrategy[dict[str, Any]]:
        fields = TABLE[op].params.model_fields
        others = {name: info for name, info in fields.items() if name != bad_name}
        required = {name: fits(name) for name, info in others.items() if info.is_required()}
        optional = {name: fits(name) for name, info in others.items() if not info.is_required()}
        return st.fixed_dictionaries(
            {**required, bad_name: bad(fields[bad_name])}, optional=optional
        )

    def for_op(op: str) -> st.SearchStrategy[tuple[str, Any]]:
        fields = TABLE[op].params.model_fields
        params = st.one_of(
            *(one_bad(op, name) for name in fields),
            st.dictionaries(st.sampled_from([*fields, "unknown", "__class__"]), anything),
            anything,
        )
        return st.tuples(st.just(op), params)

    return st.sampled_from(OPS).flatmap(for_op)
