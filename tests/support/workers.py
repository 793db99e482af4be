"""Real reflection workers for tests: an embedded Valkey and Celery worker processes.

No eager mode and no fake Redis: the worker is ``celery -A reflector.worker worker`` in a
subprocess, talking to a real Valkey on the test home's Unix socket, exactly as
``agentd up`` runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import redis

from agentd.stack.supervisor import worker_command
from shared.coordination.embedded import EmbeddedRedis
from shared.store.layout import Layout
from tests.support.waiting import ceiling, wait_for


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 of ``proc``'s whole process group (a worker and its pool children)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(ceiling(10))


def stop_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM to ``proc``'s process group, kill -9 if it has not ended within a ceiling."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(ceiling(30))
    except subprocess.TimeoutExpired:
        kill_group(proc)


class RedisForTests:
    """The embedded Valkey exactly as ``agentd up`` runs it, persistence included, so a
    restart in a test loads what the last server wrote."""

    def __init__(
        self, home: Path, listen: tuple[str, int] | None = None, password: str | None = None
    ) -> None:
        layout = Layout(home)
        self.password = password
        self.server = EmbeddedRedis(
            layout.embedded_redis_socket,
            data_dir=layout.valkey_dir,
            log_path=home / "valkey.out",
            listen=listen,
            password=password,
        )

    def start(self) -> RedisForTests:
        self.server.start()
        return self

    @property
    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.server.socket_path), password=self.password)

    def kill_hard(self) -> None:
        """kill -9: no shutdown, the socket file stays behind."""
        assert self.server.process is not None
        self.server.process.kill()
        self.server.process.wait(ceiling(10))

    def stop(self) -> None:
        self.server.stop()


class WorkerProcess:
    """One ``celery worker`` process (concurrency 1) on the test home."""

    def __init__(self, home: Path, name: str = "w1", **env: str) -> None:
        self.home = home
        self.name = name
        self.env = {**os.environ, "AGENTD_HOME": str(home), "PYTHONUNBUFFERED": "1", **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home.parent / f"{home.name}-worker-{name}.out"
        """Beside the home, not in it: the test that traces a worker's writes holds the
        home to none."""
        self.command = worker_command(name)

    def start(self, timeout_s: float = 30.0) -> WorkerProcess:
        output = open(self.log_path, "ab")  # noqa: SIM115 - kept for the process's life
        self.proc = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output.close()

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited before it was ready:\n{self.output()}")
            return b"ready" in self.log_path.read_bytes()

        wait_for(ready, f"worker {self.name} to be ready", timeout_s=timeout_s, error=RuntimeError)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill_hard(self) -> None:
        """kill -9 of the whole worker (main process and its pool children)."""
        assert self.proc is not None
        kill_group(self.proc)

    def stop(self) -> None:
        stop_group(self.proc)
