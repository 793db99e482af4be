"""Recall processes forked from a parent that has imported recall, for in-process daemons.

Every daemon starts a recall process. ``agentd serve`` spawns ``python -m
agentd.recall.process``, which spends about 0.1 s of CPU on Python's start and its imports
before it serves. The ~250 daemons a suite run starts inside the xdist workers
(:class:`tests.support.daemon.DaemonRunner`) fork theirs instead, from a multiprocessing
forkserver that imported the recall process's module once per worker (4 ms of CPU a
start): the same ``main`` on the same arguments, in a process of its own and a
process group of its own, with the daemon's environment and working directory. The spawned
way is what every test of ``agentd serve`` and ``agentd up`` runs.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import socket
import subprocess
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from agentd.recall import process as recall_process
from tests.support.waiting import ceiling

_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload([recall_process.__name__, __name__])
"""What the forkserver imports once: what a child runs, and this module, whose ``_run`` it
calls (and which imports no more than that: the client is imported where it spawns)."""


class ForkedRecall:
    """A recall process started by :func:`spawn_forked`, as the client waits on and kills it."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None  # started
        return self._process.pid

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"recall process {self.pid}", timeout or 0.0)
        return self._process.exitcode

    def kill(self) -> None:
        self._process.kill()


def spawn_forked(sock: socket.socket, args: list[str]) -> ForkedRecall:
    """A :data:`~agentd.recall.client.SpawnRecall` that forks from this worker's forkserver."""
    from agentd.recall import client  # the module a test may have swapped, named at spawn

    grouped, in_its_group = _FORKSERVER.Pipe(duplex=False)
    process = _FORKSERVER.Process(
        target=_run,
        args=(client.RECALL_MODULE, sock, args, dict(os.environ), in_its_group),
        name="recall",
        daemon=True,  # ended, not waited for, if this worker exits with it still running
    )
    process.start()
    in_its_group.close()
    with grouped:  # in its own group before this returns, as ``subprocess.Popen`` has it
        if not grouped.poll(ceiling(30)):
            process.kill()
            raise OSError("the forked recall process did not start")
    return ForkedRecall(process)


def _run(
    module: str,
    sock: socket.socket,
    args: list[str],
    environ: dict[str, str],
    in_its_group: Connection,
) -> None:
    os.setpgid(0, 0)  # as ``process_group=0``: a signal to the daemon's group misses it
    with in_its_group:
        in_its_group.send_bytes(b"")
    os.environ.clear()
    os.environ.update(environ)
    importlib.import_module(module).main([str(sock.detach()), *args])
