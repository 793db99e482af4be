"""The event loop gets the CPU first: recall runs in a process of its own, its threads and
the reflection workers at background priority, the daemon hands the interpreter lock back
to its loop within 1 ms, and what start-up built is kept out of the garbage collector's
full walks (``shared/priority.py`` says why). Linux only: a nice value is per thread there."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.priority import BACKGROUND_NICENESS, FULL_COLLECTIONS_BY_HAND, LOOP_SWITCH_INTERVAL_S
from tests.support.daemon import DaemonRunner
from tests.support.waiting import wait_for
from tests.support.workers import RedisForTests, WorkerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc"),
]


def niceness(task: Path) -> int:
    """The nice value in ``/proc/<pid>[/task/<tid>]/stat`` (its 19th field)."""
    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19 - 3])


def living_niceness(tasks: Path) -> set[int]:
    """The nice values of the threads under ``tasks`` that are still there when read (tantivy's
    threads come and go between listing them and reading each)."""
    values = set()
    for task in tasks.iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            values.add(niceness(task))
    return values


def background(base: int) -> int:
    return min(base + BACKGROUND_NICENESS, 19)


def thread_niceness(thread: threading.Thread) -> int:
    return niceness(Path(f"/proc/self/task/{thread.native_id}"))


@pytest.fixture
def process_wide_settings() -> Iterator[None]:
    """What the daemon sets for its whole process, put back for the tests after this one."""
    before = sys.getswitchinterval(), gc.get_threshold()
    yield
    sys.setswitchinterval(before[0])
    gc.set_threshold(*before[1])
    gc.unfreeze()


def test_searches_run_in_their_own_process_below_a_loop_that_gets_the_lock_fast_and_skips_gc(
    daemon: DaemonRunner, process_wide_settings: None
) -> None:
    # An in-process index an earlier test on this worker built leaves its threads behind.
    earlier = set(threading.enumerate())
    daemon.start()
    daemon.result("chat", {"text": "the deploy key lives in vault"})
    assert daemon.result("recall.search", {"query": "deploy key"})["hits"]

    assert daemon.thread is not None and daemon.daemon is not None
    loop = thread_niceness(daemon.thread)
    recall = daemon.daemon.recall.pid
    assert recall is not None and recall != os.getpid()
    searched_here = [
        t.name for t in set(threading.enumerate()) - earlier if t.name.startswith("recall_")
    ]
    assert searched_here == [], "a search ran in the daemon's own threads"
    assert background(loop) in living_niceness(Path(f"/proc/{recall}/task")), (
        "no search thread below"
    )
    assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL_S)
    assert gc.get_freeze_count() > 0


def test_full_collections_wait_until_the_daemon_is_quiet(
    daemon: DaemonRunner, process_wide_settings: None
) -> None:
    daemon.start()
    assert gc.get_threshold()[2] == FULL_COLLECTIONS_BY_HAND, "the collector starts them"
    assert daemon.daemon is not None
    collections = daemon.daemon.quiet_collection.collections
    daemon.result("chat", {"text": "hello"})
    wait_for(lambda: "quiet" in collections, "a full collection once the daemon was quiet")


def test_a_reflection_worker_and_its_pool_run_at_background_priority(
    agentd_home: Path,
) -> None:
    redis = RedisForTests(agentd_home).start()
    worker = WorkerProcess(agentd_home).start()
    try:
        assert worker.proc is not None
        main = Path(f"/proc/{worker.proc.pid}")
        children = (main / "task" / str(worker.proc.pid) / "children").read_text().split()
        assert children, "the worker has no pool process"
        expected = background(niceness(Path("/proc/self")))
        assert niceness(main) == expected
        assert {niceness(Path(f"/proc/{child}")) for child in children} == {expected}
    finally:
        worker.stop()
        redis.stop()
