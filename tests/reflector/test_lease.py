"""The reflection lease outlives nobody: a holder that is a dead process of this host loses
it at once (Redis persists leases across a crash of everything); a live holder, or one on
another host, keeps it until its TTL."""

from __future__ import annotations

import socket
import subprocess

from shared.coordination import redis_keys
from shared.coordination.lease import ReflectionLease, holder_alive
from tests.support.workers import RedisForTests


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_lease_whose_holder_died_is_taken_over_at_once(redis_server: RedisForTests) -> None:
    client = redis_server.client
    client.set(redis_keys.lease("a1"), f"rq-dead {socket.gethostname()} {_dead_pid()}", ex=60)
    assert not holder_alive(client, "a1")

    lease = ReflectionLease(client, "a1", owner="rq-new", ttl_s=60)

    assert lease.acquire()
    assert holder_alive(client, "a1")
    lease.release()


def test_a_live_holder_or_one_on_another_host_keeps_the_lease(
    redis_server: RedisForTests,
) -> None:
    client = redis_server.client
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        for holder in (
            f"rq-live {socket.gethostname()} {sleeper.pid}",
            f"rq-far other-host-{socket.gethostname()} {_dead_pid()}",
        ):
            client.set(redis_keys.lease("a1"), holder, ex=60)
            assert holder_alive(client, "a1")
            assert not ReflectionLease(client, "a1", owner="rq-new", ttl_s=60).acquire()
            assert client.get(redis_keys.lease("a1")) == holder.encode()
    finally:
        sleeper.kill()
        sleeper.wait()
