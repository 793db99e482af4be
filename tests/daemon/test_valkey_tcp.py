"""``agentd up`` with ``AGENTD_REDIS_LISTEN``: the embedded Valkey also listens on TCP for
workers on other hosts, never without a password. The password is made once into the
home's ``agentd.toml`` (0600, the user's other settings kept), reaches the server in a
file of its own (not its command line, which ``ps`` shows everyone), and the daemon and
the local workers use it; a client without it is refused."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import redis

from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling, wait_for

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_listening_on_tcp_makes_a_password_once_and_every_client_needs_it(
    agentd_home: Path,
) -> None:
    port = _free_port()
    (agentd_home / "agentd.toml").write_text("reflection_step_count = 7\n\n[ignored]\nx = 1\n")
    env = {
        **os.environ,
        "AGENTD_WORKERS": "1",
        "AGENTD_REDIS_LISTEN": f"127.0.0.1:{port}",
        "AGENTD_LOG_FORMAT": "json",
    }
    output = agentd_home.parent / f"{agentd_home.name}-up.out"
    with open(output, "wb") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "up"], env=env, stdout=out, stderr=out
        )
    try:

        def ready() -> bool:
            assert up.poll() is None, output.read_text()
            return (
                b"reflector_ready" in output.read_bytes() and not run_agentctl("status").returncode
            )

        wait_for(ready, "agentd up with its worker", timeout_s=90, poll_s=0.2)

        config = agentd_home / "agentd.toml"
        settings = tomllib.loads(config.read_text())
        password = settings["redis_password"]
        assert len(password) >= 32 and settings["reflection_step_count"] == 7
        assert config.stat().st_mode & 0o777 == 0o600
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port, socket_timeout=2).ping()
        assert redis.Redis(host="127.0.0.1", port=port, password=password).ping()
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        assert password not in ps.stdout
        assert password not in output.read_text()
        told = re.search(
            r"AGENTD_REDIS_URL=redis://:PASSWORD@127\.0\.0\.1:(\d+)/0", output.read_text()
        )
        assert told is not None and int(told[1]) == port
        status = json.loads(run_agentctl("status", "--json").stdout)
        assert status["redis"]["reachable"] and len(status["redis"]["workers"]) == 1
    finally:
        up.terminate()
        up.wait(ceiling(60))
    assert tomllib.loads((agentd_home / "agentd.toml").read_text())["redis_password"] == password
