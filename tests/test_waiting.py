"""The suite's one way to wait: a condition polled up to a ceiling the one setting scales."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys

import pytest

from tests.support import waiting


class Harness(Exception):
    pass


def test_the_condition_s_first_truthy_value_is_returned() -> None:
    answers = iter([None, 0, "", "found"])

    assert waiting.wait_for(lambda: next(answers), "the answer", poll_s=0) == "found"


def test_a_condition_that_never_holds_fails_naming_what_and_the_scaled_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waiting, "SCALE", 0.01)
    looks = itertools.count()

    with pytest.raises(AssertionError, match=r"timed out after 0 s waiting for the moon"):
        waiting.wait_for(lambda: next(looks) < 0, "the moon", timeout_s=5, poll_s=0.001)
    assert next(looks) > 1, "it looked more than once"

    with pytest.raises(Harness, match="the sun"):
        waiting.wait_for(lambda: False, "the sun", timeout_s=5, poll_s=0.001, error=Harness)


def test_the_async_wait_lets_the_loop_run_while_it_polls() -> None:
    async def scenario() -> str:
        done: list[str] = []
        asyncio.get_running_loop().call_later(0.01, done.append, "ran")
        return await waiting.wait_until(lambda: done and done[0], "the callback")

    assert asyncio.run(scenario()) == "ran"


def test_ceilings_scale_by_the_setting_and_a_bad_setting_is_refused_by_name() -> None:
    code = "from tests.support.waiting import ceiling; print(ceiling(30))"

    def run(scale: str) -> subprocess.CompletedProcess[str]:
        env = {"AGENTD_TEST_TIMEOUT_SCALE": scale, "PATH": "/usr/bin:/bin"}
        return subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=waiting.ceiling(30),
        )

    assert run("2.5").stdout == "75.0\n"
    assert run("").stdout == f"{30 * waiting.DEFAULT_SCALE}\n"
    for bad in ("abc", "0", "-1"):
        refused = run(bad)
        assert refused.returncode == 1 and "AGENTD_TEST_TIMEOUT_SCALE" in refused.stderr
