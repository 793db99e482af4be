"""The daemon that agentctl's tests talk to.

agentctl runs as a real process (``run_agentctl``, a pseudo-terminal) and finds the daemon
the way a user's does: by ``AGENTD_HOME``, on its Unix socket. What answers there need not
be a second Python process: ``serving`` is a real :class:`~agentd.daemon.server.Daemon` in
this worker's own thread (tests/support/daemon.py), which costs next to nothing where
``agentd serve`` costs ~0.8 s of CPU to start (its imports) before its first answer.

A test whose subject is the process itself still starts ``agentd serve``
(:class:`tests.support.processes.AgentdProcess`): its signals and exit code, a kill -9 and
what survives it, its serve lock, its environment and keys, its log files and the umask
its entry point sets, settings it reads from the environment or ``agentd.toml``.
"""

from __future__ import annotations

import pytest

from tests.support.daemon import DaemonRunner


@pytest.fixture
def serving(daemon: DaemonRunner) -> DaemonRunner:
    """The daemon on the test's home with the default settings, started (the mock model)."""
    daemon.start()
    return daemon
