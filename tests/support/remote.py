"""A reflection worker on "another host": a network namespace of its own, joined to this
one by a veth pair (it reaches Redis over TCP, with a password), and a mount namespace of
its own in which ``/tmp`` — where the daemon's home is — is an empty tmpfs. It runs
``agentd worker``, as a second machine would; its output comes out through a descriptor
opened before the namespaces were made.

Needs root, ``ip`` (iproute2) and ``unshare`` (util-linux): :func:`unavailable` says why
not where they are missing, and the tests skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.homes import HOMES
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests, kill_group, stop_group

ROOT = Path(__file__).resolve().parents[2]

HIDE_TMP = """set -e
IFS=:
i=0
for keep in $KEEP_UNDER_TMP; do
  i=$((i + 1)); mkdir -p "/run/agentd-keep-$$/$i"; mount --bind "$keep" "/run/agentd-keep-$$/$i"
done
mount -t tmpfs -o mode=0700 tmpfs /tmp
[ -z "$HIDE_TOO" ] || mount -t tmpfs -o mode=0700 tmpfs "$HIDE_TOO"
i=0
for keep in $KEEP_UNDER_TMP; do
  i=$((i + 1)); mkdir -p "$keep"; mount --move "/run/agentd-keep-$$/$i" "$keep"
  rmdir "/run/agentd-keep-$$/$i"
done
[ "$i" = 0 ] || rmdir "/run/agentd-keep-$$"
mkdir -p /tmp/worker-home
exec "$@"
"""
"""Cover ``/tmp``, where the daemon's home is, with an empty tmpfs (and the temp
directory, where ``make test`` puts homes, when that is elsewhere: ``HIDE_TOO``); first set
aside (and then put back) what the worker runs from when that is under ``/tmp`` too: a
checkout cloned there, as CI's is, and its virtualenv."""
HIDE_TOO = "" if HOMES == "/tmp" else HOMES
HIDDEN = [Path(hidden) for hidden in ("/tmp", HIDE_TOO) if hidden]
"""Where the daemon's home may be: what the remote worker does not see."""


def kept_under_tmp() -> str:
    """This checkout and this Python where they lie under ``/tmp`` (``:``-separated, the
    outermost of nested ones only)."""
    wanted = {ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    under = [p for p in wanted if p.is_relative_to("/tmp") and p != Path("/tmp")]
    return ":".join(
        str(p) for p in sorted(under) if not any(p != q and p.is_relative_to(q) for q in under)
    )


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=ceiling(30), check=False)


def unavailable() -> str | None:
    """Why a remote worker cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network and mount namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no {tool} here"
    probe = f"agtp{secrets.token_hex(3)}"
    made = _run("ip", "netns", "add", probe)
    if made.returncode != 0:
        return f"ip netns add fails here: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe)
    return None


class Link:
    """A network namespace and a veth pair between it and this one, a /30 subnet each."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.netns = f"agt{tag}"
        self.host_side = f"vh{tag}"
        self.ns_side = f"vn{tag}"
        self.host_ip = self.ns_ip = ""

    def up(self) -> Link:
        """Make the namespace and the pair, on a /30 no other link of the host uses (tests
        in parallel each take theirs under a lock)."""
        with open("/tmp/agentd-test-links.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = _run("ip", "-o", "-4", "addr", "show").stdout
            free = [n for n in range(1, 255) if f" 10.234.{n}." not in taken]
            octet = secrets.choice(free)
            self.host_ip = f"10.234.{octet}.1"
            self.ns_ip = f"10.234.{octet}.2"
            return self._make()

    def _make(self) -> Link:
        steps = [
            ("ip", "netns", "add", self.netns),
            ("ip", "link", "add", self.host_side, "type", "veth", "peer", "name", self.ns_side),
            ("ip", "link", "set", self.ns_side, "netns", self.netns),
            ("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_side),
            ("ip", "link", "set", self.host_side, "up"),
            ("ip", "netns", "exec", self.netns, "ip", "addr", "add", f"{self.ns_ip}/30", "dev",
             self.ns_side),
            ("ip", "netns", "exec", self.netns, "ip", "link", "set", self.ns_side, "up"),
            ("ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up"),
        ]  # fmt: skip
        for step in steps:
            done = _run(*step)
            if done.returncode != 0:
                self.down()
                raise RuntimeError(f"{' '.join(step)}: {done.stderr.strip()}")
        return self

    def free_port(self) -> int:
        with socket.socket() as probe:
            probe.bind((self.host_ip, 0))
            return int(probe.getsockname()[1])

    def down(self) -> None:
        _run("ip", "netns", "del", self.netns)
        _run("ip", "link", "del", self.host_side)


class RemoteWorker:
    """``agentd worker`` in :class:`Link`'s namespace, with ``/tmp`` hidden."""

    def __init__(self, link: Link, redis_url: str, output: Path, name: str = "remote", **env: str):
        self.link = link
        self.name = name
        self.output_path = output
        kept = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        self.env = {
            **kept,
            "HOME": "/tmp/worker-home",
            "AGENTD_REDIS_URL": redis_url,
            "AGENTD_WORKER_DIR": "/tmp/worker",
            "AGENTD_BLOCK_REMOTE_MODELS": "1",
            "AGENTD_LOG_FORMAT": "console",
            "PYTHONUNBUFFERED": "1",
            "KEEP_UNDER_TMP": kept_under_tmp(),
            "HIDE_TOO": HIDE_TOO,
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self, *worker_args: str) -> list[str]:
        return [
            "ip", "netns", "exec", self.link.netns,
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", HIDE_TMP, "sh",
            sys.executable, "-m", "agentd.cli", *worker_args,
        ]  # fmt: skip

    def run(self, *worker_args: str) -> subprocess.CompletedProcess[str]:
        """Run ``agentd <worker_args>`` there to its end (a doctor, a refused start)."""
        return subprocess.run(
            self.command(*worker_args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=ceiling(120),
            cwd="/",
            check=False,
        )

    def start(self, timeout_s: float = 60.0) -> RemoteWorker:
        with open(self.output_path, "ab") as output:
            self.proc = subprocess.Popen(
                self.command("worker", "--concurrency", "1", "--name", self.name),
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the remote worker exited before it was ready:\n{self.output()}"
                )
            return b"reflector_ready" in self.output_path.read_bytes()

        wait_for(ready, "the remote worker to be ready", timeout_s=timeout_s, error=RuntimeError)
        return self

    def output(self) -> str:
        return self.output_path.read_text(errors="replace") if self.output_path.exists() else ""

    def kill_hard(self) -> None:
        """kill -9 of the whole worker (its main process and its pool children)."""
        assert self.proc is not None
        kill_group(self.proc)

    def stop(self) -> None:
        stop_group(self.proc)


@contextlib.contextmanager
def remote_redis(home: Path, out: Path, password: str) -> Iterator[dict[str, Any]]:
    """The embedded Valkey of ``home`` listening also on the host's end of a fresh veth
    pair, with ``password``: ``link``, ``redis``, ``url`` (for a remote worker), ``out``
    (where workers' output goes) and ``workers`` (stopped at the end)."""
    assert any(home.is_relative_to(hidden) for hidden in HIDDEN), (
        "the home must be where the remote worker sees none"
    )
    assert not any(home.is_relative_to(kept) for kept in kept_under_tmp().split(":") if kept), (
        "the home must not lie in what the remote worker keeps of /tmp"
    )
    link = Link().up()
    port = link.free_port()
    redis = RedisForTests(home, listen=(link.host_ip, port), password=password)
    parts: dict[str, Any] = {
        "link": link,
        "redis": redis,
        "url": f"redis://:{password}@{link.host_ip}:{port}/0",
        "out": out,
        "workers": [],
    }
    try:
        redis.start()
        yield parts
    finally:
        for worker in parts["workers"]:
            worker.stop()
        redis.stop()
        link.down()
