"""Start ``agentd`` and run ``agentctl`` as real processes, the way a user does."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.home import socket_path
from shared.protocol import request
from tests.support.waiting import ceiling, wait_for


class AgentdProcess:
    """``agentd serve`` in a subprocess on the current ``AGENTD_HOME``."""

    def __init__(self, *, open_file_limit: int | None = None, **env: str) -> None:
        """``open_file_limit`` sets both the soft and the hard limit of the daemon, which
        then cannot raise it (as under a unit's ``LimitNOFILE=``)."""
        self.env = {**os.environ, **env}
        self.home = Path(self.env["AGENTD_HOME"])
        self.open_file_limit = open_file_limit
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> AgentdProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentd.cli", "serve"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=None if self.open_file_limit is None else self._limit_open_files,
        )

        def answering() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentd exited early: {self.stderr()}")
            return answers_status(self.home)

        wait_for(answering, "agentd to answer status", timeout_s=timeout_s, error=TimeoutError)
        return self

    def _limit_open_files(self) -> None:
        assert self.open_file_limit is not None
        limit = self.open_file_limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    def stderr(self) -> str:
        if self.proc is None or self.proc.stderr is None:
            return ""
        return (
            self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
        )

    def terminate(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(ceiling(timeout_s))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(ceiling(10))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()


def answers_status(home: Path, timeout_s: float = 10.0) -> bool:
    """Whether a daemon on ``home`` answers ``status``: what ``agentctl status`` asks,
    asked on the socket here, so polling for a start costs no process per look."""
    try:
        answer = final_answer(socket_path(home), "status", timeout_s=timeout_s)
    except (OSError, ValueError):
        return False
    return answer is not None and bool(answer["ok"])


def final_answer(
    path: Path, op: str, params: dict[str, Any] | None = None, *, timeout_s: float = 10.0
) -> dict[str, Any] | None:
    """The final line of one request to the daemon listening on ``path`` (its ``ok`` true
    or false), its event lines skipped; None if the daemon closed the connection first.
    A socket error or a line that is not JSON is raised (``OSError``, ``ValueError``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ceiling(timeout_s))
        sock.connect(str(path))
        sock.sendall(request("probe", op, params))
        with sock.makefile("rb") as lines:
            for line in lines:
                message: dict[str, Any] = json.loads(line)
                if "ok" in message:
                    return message
    return None


def run_agentctl(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.client", *args],
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=ceiling(timeout_s),
    )


def socket_exists() -> bool:
    return socket_path().exists()
