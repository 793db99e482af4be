"""``agentctl api-key`` and what ``agentd doctor`` says about the OpenAI-compatible endpoint:
the key printed once and kept only as a hash, names unique among keys in use, a revoked
key listed as revoked, the endpoint's address and whether any key opens it, and a key
file that cannot be read named without stopping the daemon."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow

KEY = re.compile(r"^agentd-[A-Za-z0-9_-]{43}$")


def _doctor() -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "agentd.cli", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(120),
    )
    return done.stdout.splitlines()


def _endpoint_line(lines: list[str]) -> str:
    (line,) = [line for line in lines if "openai endpoint:" in line]
    return line


def test_a_key_is_printed_once_listed_without_itself_and_revoked_by_name(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()

    empty = run_agentctl("api-key", "list")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert empty.stderr == "no API key: make one with `agentctl api-key create NAME`\n"

    created = run_agentctl("api-key", "create", "editor")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert KEY.match(key), created.stdout
    assert "it is shown only now" in created.stderr
    assert "the endpoint is off until the web view is on" in created.stderr
    assert key not in (agentd_home / "api-keys.json").read_text()

    again = run_agentctl("api-key", "create", "editor")
    assert again.returncode == 1
    assert again.stderr.startswith("name_taken: an API key named 'editor' exists")

    listed = run_agentctl("api-key", "list").stdout.splitlines()
    assert len(listed) == 1 and listed[0].startswith("editor  key-")
    assert f"  {key[:12]}…  created " in listed[0] and listed[0].endswith("  in use")
    assert key not in run_agentctl("api-key", "list", "--json").stdout

    revoked = run_agentctl("api-key", "revoke", "editor")
    assert revoked.returncode == 0
    assert re.fullmatch(
        r"revoked API key editor \(key-[0-9A-Z]{26}\); it opens nothing any more\n", revoked.stdout
    )
    assert " revoked " in run_agentctl("api-key", "list").stdout
    twice = run_agentctl("api-key", "revoke", "editor")
    assert twice.returncode == 1 and twice.stderr.startswith("unknown_api_key: ")
    assert run_agentctl("api-key", "create", "editor").returncode == 0, "the name is free again"
    assert run_agentctl("api-key", "create").returncode == 2


def test_doctor_names_the_endpoint_and_whether_a_key_opens_it(daemon: DaemonRunner) -> None:
    daemon.start(web="127.0.0.1:0")
    port = daemon.daemon.web.port  # type: ignore[union-attr]
    endpoint = f"http://127.0.0.1:{port}/v1"

    assert _endpoint_line(_doctor()) == (
        f"✓ openai endpoint: {endpoint}; no API key yet, so every request is refused "
        "(agentctl api-key create NAME)"
    )
    daemon.result("apikey.create", {"name": "one"})
    daemon.result("apikey.create", {"name": "two"})
    daemon.result("apikey.revoke", {"key": "two"})
    assert _endpoint_line(_doctor()) == f"✓ openai endpoint: {endpoint}; 1 API key in use"


def test_doctor_says_the_endpoint_is_off_with_the_web_view_and_counts_keys_on_disk(
    daemon: DaemonRunner,
) -> None:
    daemon.start()
    assert _endpoint_line(_doctor()).startswith("✓ openai endpoint: off, as the web view is")
    daemon.result("apikey.create", {"name": "one"})
    daemon.stop()

    line = _endpoint_line(_doctor())
    assert line.startswith("✓ openai endpoint: off, as the web view is")
    assert line.endswith("; 1 API key in use")


def test_a_damaged_key_file_refuses_every_key_and_doctor_names_it(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    agentd_home.mkdir(parents=True, exist_ok=True)
    (agentd_home / "api-keys.json").write_text(json.dumps({"keys": "not a list"}))
    daemon.start(web="127.0.0.1:0")

    assert daemon.result("status")["ready"], "the daemon serves the socket all the same"
    refused = run_agentctl("api-key", "create", "editor")
    assert refused.returncode == 1 and refused.stderr.startswith("corrupt_state_file: ")
    line = _endpoint_line(_doctor())
    assert line.startswith("✗ openai endpoint: the API key file cannot be read")
