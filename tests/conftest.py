"""Every test gets its own short ``AGENTD_HOME`` (and a reflection worker's directory,
``AGENTD_WORKER_DIR``, outside it) and an environment without our settings (but the
suite's own ``AGENTD_TEST_TIMEOUT_SCALE``, which the processes it starts read too: see
``tests/support/waiting.py``).

Unix socket paths are limited to ~107 bytes, and pytest's ``tmp_path`` can be longer, so
the home lives in a short directory (:mod:`tests.support.homes`: on tmpfs under ``make
test``); it goes at the test's end, and so does whatever the test kept beside it under the
home's name: a worker's output, and the ``TMPDIR`` of the processes it starts (a Celery
worker killed with -9 leaves its ``pymp-*`` directory there). Remote model calls are
refused (``AGENTD_BLOCK_REMOTE_MODELS``): only the local fake OpenAI server may be reached.
Every test starts under the common login umask 022, whatever the one before it did:
agentd's entry points set umask 077 for the whole process, and a test that calls one
in-process would otherwise decide the modes of every later test's files on that worker.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.providers.credentials import is_key_name
from tests.support.clock import FakeClock
from tests.support.daemon import DaemonRunner
from tests.support.homes import HOMES
from tests.support.small_disk import SmallDisk, mounted_small_disk
from tests.support.waiting import SCALE_VARIABLE
from tests.support.workers import RedisForTests

LOGIN_UMASK = 0o022
SDKS = ("litellm", "openai", "mcp")
"""The SDKs that cost seconds of CPU to import (the ``sdk`` mark)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``sdk`` first, in their order, then the rest in theirs.

    Under ``--dist worksteal`` (the Makefile's) each xdist worker starts on a contiguous
    slice of this list and others steal only from its end, so the ``sdk`` tests all run on
    the first worker: litellm, OpenAI's client and the MCP SDK (five seconds of CPU
    together) are imported by one worker instead of by every one.
    """
    items.sort(key=lambda item: item.get_closest_marker("sdk") is None)


@pytest.fixture(autouse=True)
def sdk_imports_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that imports an SDK into this process without the ``sdk`` mark fails: left
    unmarked, it would have every xdist worker it lands on pay the import. (Caught on a
    worker that had not imported that SDK yet, as every worker but the first has not.)"""
    before = {name for name in SDKS if name in sys.modules}
    yield
    imported = [name for name in SDKS if name in sys.modules and name not in before]
    if imported and request.node.get_closest_marker("sdk") is None:
        pytest.fail(f"imported {', '.join(imported)} in-process: mark the test sdk")


@pytest.fixture(autouse=True)
def login_umask() -> Iterator[None]:
    before = os.umask(LOGIN_UMASK)
    yield
    os.umask(before)


@pytest.fixture(autouse=True)
def no_console_log_on_a_closed_stream() -> Iterator[None]:
    """A test that runs an entry point in-process under ``capsys`` (``agentd doctor``, say)
    has logging write to the stream capsys gave it, which is closed when the test ends.
    Every later test on that worker would then lose its log lines, each with a
    ``--- Logging error ---`` traceback: the handler goes with its stream."""
    yield
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if getattr(getattr(handler, "stream", None), "closed", False):
            root.removeHandler(handler)


@pytest.fixture
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key in this process's environment, by the daemon's own rule of what a key is
    (litellm looks there when a daemon run in the worker was handed none)."""
    for name in [name for name in os.environ if is_key_name(name)]:
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def agentd_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("AGENTD_") and name != SCALE_VARIABLE:
            monkeypatch.delenv(name)
    home = Path(tempfile.mkdtemp(prefix="agentd-t-", dir=HOMES))
    worker_dir = Path(tempfile.mkdtemp(prefix="agentd-w-", dir=HOMES))
    monkeypatch.setenv("AGENTD_HOME", str(home))
    monkeypatch.setenv("AGENTD_WORKER_DIR", str(worker_dir))
    temp = home.parent / f"{home.name}-tmp"  # the processes' temp files go with the home
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("AGENTD_BLOCK_REMOTE_MODELS", "1")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    yield home
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(worker_dir, ignore_errors=True)
    for beside in home.parent.glob(f"{home.name}-*"):  # e.g. a worker's output, kept beside
        if beside.is_dir() and not beside.is_symlink():
            shutil.rmtree(beside, ignore_errors=True)
        else:
            beside.unlink(missing_ok=True)


@pytest.fixture
def daemon(agentd_home: Path) -> Iterator[DaemonRunner]:
    """An in-process daemon (its own thread and event loop) on the test's home.

    Start it with ``daemon.start(providers=..., **settings)``; it stops after the test.
    """
    runner = DaemonRunner(agentd_home)
    yield runner
    runner.stop()


@pytest.fixture
def clock() -> FakeClock:
    """The test's clock: injected wherever messages, payloads and outcomes get a time."""
    return FakeClock()


@pytest.fixture
def redis_server(agentd_home: Path) -> Iterator[RedisForTests]:
    """An embedded Valkey on the test's home (the one ``agentd up`` would start)."""
    server = RedisForTests(agentd_home).start()
    yield server
    server.stop()


@pytest.fixture
def small_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    """A 4 MiB tmpfs whose ``home`` is ``AGENTD_HOME`` (skipped where it cannot be mounted)."""
    with mounted_small_disk() as disk:
        monkeypatch.setenv("AGENTD_HOME", str(disk.home))
        yield disk


@pytest.fixture
def daemon_on_small_disk(small_disk: SmallDisk) -> Iterator[DaemonRunner]:
    """An in-process daemon whose home is on :func:`small_disk`."""
    runner = DaemonRunner(small_disk.home)
    yield runner
    runner.stop()
