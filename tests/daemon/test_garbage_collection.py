"""Full garbage collections run when the daemon is quiet, or when one is overdue; never
because a busy daemon's heap grew (``agentd/daemon/garbage_collection.py`` says why)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from agentd.daemon.garbage_collection import QuietCollection

TICK_S = 0.02


class Cycle:
    """An object only the cycle collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def nothing_left_frozen() -> Iterator[None]:
    yield
    gc.unfreeze()


async def _run_for(collection: QuietCollection, ticks: int, during: object = None) -> None:
    task = asyncio.create_task(collection.run())
    try:
        for _ in range(ticks):
            await asyncio.sleep(TICK_S)
            if callable(during):
                during()
    finally:
        task.cancel()


def test_a_daemon_that_served_requests_collects_once_it_has_been_quiet() -> None:
    in_flight = [0]
    collection = QuietCollection(lambda: in_flight[0], quiet_s=TICK_S, overdue_s=3600)

    async def scenario() -> None:
        task = asyncio.create_task(collection.run())
        for _ in range(40):  # busy: requests start four times a tick
            collection.request_started()
            await asyncio.sleep(TICK_S / 4)
        assert list(collection.collections) == [], "collected while requests kept coming"
        in_flight[0] = 1  # one long request, nothing new
        await asyncio.sleep(TICK_S * 6)
        assert list(collection.collections) == [], "collected while a request ran"
        in_flight[0] = 0
        await asyncio.sleep(TICK_S * 8)
        task.cancel()

    gc.unfreeze()
    asyncio.run(scenario())
    assert list(collection.collections) == ["quiet"], "once per quiet spell, not again while idle"
    assert gc.get_freeze_count() > 0, "what survived was not frozen"


def test_requests_started_through_another_door_keep_the_daemon_busy_too() -> None:
    web_started = [0]
    collection = QuietCollection(
        lambda: 0, started_elsewhere=lambda: web_started[0], quiet_s=TICK_S, overdue_s=3600
    )

    async def scenario() -> None:
        task = asyncio.create_task(collection.run())
        collection.request_started()  # one socket request: the daemon has served
        for _ in range(40):  # then the web view's requests, four a tick
            web_started[0] += 1
            await asyncio.sleep(TICK_S / 4)
        assert list(collection.collections) == [], "collected while the web's requests came"
        await asyncio.sleep(TICK_S * 8)
        task.cancel()

    asyncio.run(scenario())
    assert list(collection.collections) == ["quiet"]


def test_an_idle_daemon_does_not_collect_until_one_is_overdue() -> None:
    idle = QuietCollection(lambda: 0, quiet_s=TICK_S, overdue_s=3600)
    asyncio.run(_run_for(idle, 10))
    assert list(idle.collections) == []

    overdue = QuietCollection(lambda: 0, quiet_s=TICK_S, overdue_s=TICK_S * 3)
    asyncio.run(_run_for(overdue, 10))
    assert overdue.collections and set(overdue.collections) == {"overdue"}


def test_a_daemon_that_is_never_quiet_still_collects_when_one_is_overdue_freezing_nothing() -> None:
    """What a running request holds must not be frozen: it would outlive the request."""
    never_quiet = QuietCollection(lambda: 1, quiet_s=TICK_S, overdue_s=TICK_S * 4)
    gc.unfreeze()
    asyncio.run(_run_for(never_quiet, 12, during=never_quiet.request_started))
    assert never_quiet.collections and set(never_quiet.collections) == {"overdue"}
    assert gc.get_freeze_count() == 0


def _frozen_garbage_cycle() -> weakref.ref[Cycle]:
    """A cycle frozen while it was alive (as a quiet collection freezes what is alive), and
    dropped since: only a walk over the frozen objects frees it."""
    cycle = Cycle()
    freed = weakref.ref(cycle)
    gc.collect()
    gc.freeze()
    del cycle
    gc.collect()
    assert freed() is not None, "a frozen cycle outlived an ordinary collection"
    return freed


def _one_busy_spell_then_quiet(collection: QuietCollection) -> None:
    one_request = iter([collection.request_started])
    asyncio.run(_run_for(collection, 8, during=lambda: next(one_request, lambda: None)()))


def test_a_quiet_collection_walks_only_what_was_made_since_the_last_one() -> None:
    """Walking the frozen objects takes a quarter of a second once litellm is loaded."""
    freed = _frozen_garbage_cycle()
    collection = QuietCollection(lambda: 0, quiet_s=TICK_S, full_walk_every_s=3600)
    _one_busy_spell_then_quiet(collection)
    assert list(collection.collections) == ["quiet"]
    assert freed() is not None


def test_garbage_frozen_while_it_was_alive_is_freed_once_a_full_walk_is_due() -> None:
    """An agent deleted after a quiet moment froze its objects still frees them."""
    freed = _frozen_garbage_cycle()
    collection = QuietCollection(lambda: 0, quiet_s=TICK_S, full_walk_every_s=0)
    _one_busy_spell_then_quiet(collection)
    assert list(collection.collections) == ["quiet, frozen too"]
    assert freed() is None
