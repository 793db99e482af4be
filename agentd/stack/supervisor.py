"""``agentd up``: the whole stack in the foreground, started and stopped together.

It starts the embedded Valkey (unless ``AGENTD_REDIS_URL`` points at a Redis), then the
chat daemon and ``AGENTD_WORKERS`` reflection workers as child processes. Ctrl-C or
SIGTERM stops the children (workers finish the job in hand), then Redis. A child that
dies, Valkey included, is reported and restarted; the others keep running (while Valkey
is down the daemon keeps reflection requests on disk and the workers reconnect). Only a
crash loop stops the stack, and ``agentd up`` then exits 1: a child that dies within
:data:`EARLY_DEATH_S` of its start :data:`MAX_RESTARTS` times in a minute (a bad
setting, a missing binary). One that ran
for a while and was killed — an OOM kill, a stray ``kill -9`` — is always restarted,
however often it happens. A second ``agentd up`` on the same home refuses to start, and
so does one on a home a standalone ``agentd serve`` already serves, with the same words,
before it starts anything: ``run/up.lock`` is held for the run, which also tells
``agentctl status`` that a stack is alive. ``agentctl shutdown`` (the daemon exiting
cleanly) stops the whole stack. What it prints is :mod:`agentd.stack.output`'s.

No process of the stack holds a provider key in the environment it was started with
(``/proc/<pid>/environ``, which anything running as the same user reads): ``agentd up``
itself runs again without them first (:mod:`shared.providers.credentials`), keeps them in
memory, and hands the daemon and each worker theirs on a descriptor they read and close
at start; Valkey gets none.

The children die with ``agentd up`` even when it cannot stop them (``kill -9``, an OOM
kill): each is started with a parent-death signal (Linux ``PR_SET_PDEATHSIG``), so none
lives on in its own session holding the Valkey socket or the daemon's. The daemon and
Valkey get SIGTERM (the daemon stops its turns in order, Valkey syncs its append-only
file); a worker gets SIGKILL, as in any crash of a worker: the daemon sends its job again
once its lease's holder is known dead and the next worker sweeps its scratch, where a
SIGTERM would have it finish a job nobody supervises. The kernel
sends the signal when the *thread* that started the child exits, so every child is
started from the main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from agentd.daemon.effective_config import redact_url
from agentd.stack import instance
from agentd.stack.output import COLORS, VALKEY_COLOR, StackOutput, console_output
from agentd.stack.up_web import announce_when_served, check_address
from shared.coordination import redis_keys
from shared.coordination.broker import locate
from shared.coordination.embedded import EmbeddedRedis, remember_password
from shared.errors import RedisUnavailable
from shared.logging import Console
from shared.providers.credentials import HANDOFF_VARIABLE, ProviderKeys, hand_over, is_key_name
from shared.settings import Settings
from shared.store.layout import Layout

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
EARLY_DEATH_S = 10.0
"""A child that dies sooner than this after starting counts toward the crash-loop limit."""
STOP_GRACE_S = 20.0
_PR_SET_PDEATHSIG = 1
SUPERVISOR = "up"
"""The prefix, or ``process``, of what ``agentd up`` itself says."""


@dataclass
class Child:
    """A supervised process: how to start it, the one running, and its recent restarts."""

    name: str
    color: str
    launch: Callable[[], subprocess.Popen[bytes]]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    """When the running process was started (monotonic)."""
    restarts: deque[float] = field(default_factory=deque)
    """When it died early, within the last :data:`RESTART_WINDOW_S`."""

    def start(self) -> None:
        self.process = self.launch()
        self.started_at = time.monotonic()


def up_is_running(layout: Layout) -> bool:
    """True while an ``agentd up`` holds the home's lock: alive, whatever its children do."""
    return instance.held(layout.up_lock)


def already_running(settings: Settings) -> str:
    """What ``agentd up`` says on a home that an ``agentd up`` or a standalone ``agentd
    serve`` already runs: the same words for both, since the way out is the same."""
    return (
        f"agentd is already running for {settings.home}; stop it first with "
        "`agentctl shutdown` (or Ctrl-C in its terminal)"
    )


def worker_name(number: int) -> str:
    """The ``number``-th worker of ``agentd up``: its prefix and its Celery node name."""
    return f"reflector-{number}"


def dies_with_this_process(signum: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``signum`` to the child when this process
    dies; None where there is no ``prctl`` (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the fork
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # died between the fork and the prctl: no signal comes
            os._exit(1)

    return arm


def worker_command(name: str, log_level: str = "INFO", concurrency: int = 1) -> list[str]:
    """One reflection worker process: ``concurrency`` jobs at a time (one each for the
    workers of ``agentd up``), no gossip, mingle or heartbeat (they only slow start-up on
    a single node; liveness comes from our own heartbeat)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "reflector.worker",
        "worker",
        "--pool",
        "prefork",
        "--concurrency",
        str(concurrency),
        "-Q",
        redis_keys.REFLECTION_QUEUE,
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        log_level,
    ]


class Stack:
    def __init__(
        self, settings: Settings, take_keys: Callable[[], ProviderKeys] = ProviderKeys
    ) -> None:
        self.settings = settings
        self._take_keys = take_keys
        self.keys = ProviderKeys()
        """Handed to the daemon and each worker on a descriptor, never in an environment:
        Valkey gets none, and no child's ``/proc/<pid>/environ`` shows one. Taken (from
        ``os.environ``, :func:`~shared.providers.credentials.take_provider_keys`) once the
        stack is sure to run."""
        self.redis: EmbeddedRedis | None = None
        self.valkey: Child | None = None
        self.children: list[Child] = []
        """The daemon and the workers; stopped before Valkey, which they need to the end."""
        self._stopping = threading.Event()
        names = [SUPERVISOR, "valkey", "agentd", worker_name(settings.workers)]
        self.output = StackOutput(console_output(settings), names)

    def log_stream(self) -> Console:
        """Where the supervisor's own log lines go (``configure(console=…)``): out with
        the children's, as the ``up`` process."""
        return self.output.stream(SUPERVISOR, VALKEY_COLOR)

    def run(self) -> int:
        """Run the stack until it is stopped: 0 when asked to stop, 1 when it could not
        start or gave up on a child."""
        layout = self.settings.layout
        lock = instance.hold(layout.up_lock)
        if lock is None or instance.held(layout.serve_lock):
            if lock is not None:
                lock.close()
            print(already_running(self.settings), file=sys.stderr)
            return 1
        previous = {
            signum: signal.signal(signum, lambda *_: self._stopping.set())
            for signum in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            wrong = check_address(self.settings, self._say_up)
            if wrong is not None:
                print(f"agentd up: {wrong}", file=sys.stderr)
                return 1
            self.keys = self._take_keys()
            self._start_redis()
            self._spawn_all()
            announce_when_served(self.settings, self._say_up, self._stopping)
            return 0 if self._watch() else 1
        except RedisUnavailable as exc:
            print(f"agentd up: {exc.message}", file=sys.stderr)
            return 1
        finally:
            self._stop_all()
            lock.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _say_up(self, event: str, text: str, level: str) -> None:
        self._say(SUPERVISOR, event, text, level)

    def _start_redis(self) -> None:
        location = locate(self.settings)
        if not location.embedded:
            url = redact_url(location.redis_url)
            self._say(SUPERVISOR, "redis_external", f"using Redis at {url}")
            return
        listen = self._listen()
        location = locate(self.settings)  # with the password _listen may have made
        assert location.socket_path is not None
        layout = self.settings.layout
        layout.logs_dir.mkdir(parents=True, exist_ok=True)
        self.redis = EmbeddedRedis(
            location.socket_path,
            data_dir=layout.valkey_dir,
            log_path=layout.logs_dir / "valkey.log",
            preexec_fn=dies_with_this_process(signal.SIGTERM),
            listen=listen,
            password=self.settings.redis_password,
        )
        self.redis.start()  # a failure here stops `agentd up` before anything else starts
        self.valkey = Child(
            "valkey",
            VALKEY_COLOR,
            self._restart_valkey,
            self.redis.process,
            started_at=time.monotonic(),
        )
        self._say(
            "valkey",
            "valkey_started",
            f"embedded Valkey on {location.socket_path}, data in {layout.valkey_dir}",
        )
        if listen is not None:
            host, port = listen
            self._say(
                "valkey",
                "valkey_listening",
                f"also on {host}:{port}, with the password in {layout.config_file}: on "
                f"another host run `AGENTD_REDIS_URL=redis://:PASSWORD@{host}:{port}/0 "
                "agentd worker`",
            )

    def _listen(self) -> tuple[str, int] | None:
        """Where the embedded Valkey listens over TCP (``AGENTD_REDIS_LISTEN``), with a
        password made into ``agentd.toml`` first if none is set: never without one."""
        listen = self.settings.redis_listen
        if listen is None:
            return None
        if self.settings.redis_password is None:
            password = remember_password(self.settings.layout.config_file)
            self.settings = self.settings.model_copy(update={"redis_password": password})
            self._say(
                SUPERVISOR,
                "redis_password_made",
                f"made a password for the embedded Valkey in {self.settings.layout.config_file}",
            )
        host, _, port = listen.rpartition(":")
        return host.strip("[]"), int(port)

    def _restart_valkey(self) -> subprocess.Popen[bytes]:
        """Start Valkey again; it loads its append-only file. A failed start returns the
        exited process, so the watcher counts it against the restart budget."""
        assert self.redis is not None
        try:
            self.redis.start()
            self._say("valkey", "valkey_restarted", "answers again")
        except RedisUnavailable as exc:
            self._say("valkey", "valkey_restart_failed", exc.message, "error")
        assert self.redis.process is not None
        return self.redis.process

    def _spawn_all(self) -> None:
        python = sys.executable
        daemon = [python, "-m", "agentd.cli", "serve"]
        self._add("agentd", daemon, COLORS[0], signal.SIGTERM)
        for number in range(1, self.settings.workers + 1):
            name = worker_name(number)
            worker = worker_command(name, self.settings.log_level)
            self._add(name, worker, COLORS[number % len(COLORS)], signal.SIGKILL)

    def _add(self, name: str, argv: list[str], color: str, on_our_death: signal.Signals) -> None:
        child = Child(name, color, lambda: self._spawn(name, argv, color, on_our_death))
        child.start()
        self.children.append(child)

    def child_env(self) -> dict[str, str]:
        """The children's environment: ours without a key, with how to log and, when
        ``agentd up --web`` turned it on, where the daemon serves the web view."""
        log_format = "console" if self.output.console else "json"
        ours = {name: value for name, value in os.environ.items() if not is_key_name(name)}
        env = {**ours, "PYTHONUNBUFFERED": "1", "AGENTD_LOG_FORMAT": log_format}
        if self.settings.web:
            env["AGENTD_WEB"] = self.settings.web
        return env

    def _spawn(
        self, name: str, argv: list[str], color: str, on_our_death: signal.Signals
    ) -> subprocess.Popen[bytes]:
        keys = hand_over(self.keys.values)
        try:
            process = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.child_env(), HANDOFF_VARIABLE: str(keys)},
                pass_fds=(keys,),
                start_new_session=True,  # Ctrl-C reaches us alone: we stop them in order
                preexec_fn=dies_with_this_process(on_our_death),
            )
        finally:
            os.close(keys)
        threading.Thread(target=self._pump, args=(name, color, process.stdout), daemon=True).start()
        return process

    def _pump(self, name: str, color: str, stream: IO[bytes] | None) -> None:
        assert stream is not None
        for raw in stream:
            self.output.relay(name, raw.decode(errors="replace").rstrip("\n"), color)

    def _say(self, name: str, event: str, text: str, level: str = "info", **fields: Any) -> None:
        """The supervisor's own news about process ``name``, in its colour."""
        color = next((c.color for c in self.children if c.name == name), VALKEY_COLOR)
        self.output.say(name, color, event, text, level, **fields)

    def _watch(self) -> bool:
        """Reap and restart every child that exited (polling also reaps: no zombies).
        Valkey comes first, since the others need it. False when it gave up on a child."""
        supervised = ([self.valkey] if self.valkey else []) + self.children
        while not self._stopping.wait(0.5):
            for child in supervised:
                if self._stopping.is_set():
                    return True
                assert child.process is not None
                status = child.process.poll()
                if status is None:
                    continue
                if child.name == "agentd" and status == 0:
                    self._say(
                        child.name, "stack_stopping", "stopped on request; stopping the stack"
                    )
                    self._stopping.set()
                    return True
                now = time.monotonic()
                while child.restarts and now - child.restarts[0] > RESTART_WINDOW_S:
                    child.restarts.popleft()
                if now - child.started_at < EARLY_DEATH_S:
                    if len(child.restarts) >= MAX_RESTARTS:
                        self._say(
                            child.name,
                            "crash_loop",
                            f"exited with status {status} again; giving up after "
                            f"{MAX_RESTARTS} restarts in a minute that each died within "
                            f"{EARLY_DEATH_S:.0f} s",
                            "error",
                            status=status,
                        )
                        self._stopping.set()
                        return False
                    child.restarts.append(now)
                self._say(
                    child.name,
                    "child_exited",
                    f"exited with status {status}; restarting",
                    "warning",
                    status=status,
                )
                child.start()
        return True

    def _stop_all(self) -> None:
        running = [c for c in self.children if c.process and c.process.poll() is None]
        for child in running:
            assert child.process is not None
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait(5)
        if self.redis is not None:
            self.redis.stop()
            self._say("valkey", "valkey_stopped", "stopped")
