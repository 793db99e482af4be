"""Who gets the CPU first: the daemon's event loop, before the work that can wait.

One event loop answers every agent and connection, so a moment it waits for the CPU is a
moment every user waits. Two things make it wait on a busy machine, and each has its cure
here:

- **Background work on the same cores.** Recall's search and build threads, and the
  reflection workers, are CPU work nobody watches as it happens. They run at a lower
  scheduling priority (``nice`` +10), so the kernel runs the loop first when both are
  ready; they still get every cycle the loop does not want, so an idle daemon searches and
  reflects as fast as before.
- **The interpreter lock.** Each socket or file call the loop makes releases the lock and
  must win it back. While another thread runs Python code, that takes up to the switch
  interval, 5 ms by default, and a turn makes dozens of such calls (the "convoy" effect).
  The daemon asks for a 1 ms interval instead.
- **The garbage collector.** A full collection walks every object the process holds and
  stops every thread meanwhile: 50–200 ms measured under load once start-up has loaded
  the libraries (litellm alone brings tens of thousands of objects). What exists when the
  daemon is ready lives as long as the daemon, so it is frozen out of the collector's walk
  (``gc.freeze``, as the Python documentation suggests for long-running servers). What
  turns create later (every message of every open window, kept until compaction) is
  collected and frozen the same way whenever the daemon goes quiet
  (:mod:`agentd.daemon.garbage_collection`).

Both are Linux facts (a nice value is per thread there); elsewhere the calls change
nothing and the daemon works as before.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading

BACKGROUND_NICENESS = 10
"""How much lower background work runs (0 normal, 19 lowest): low enough that the loop
wins the CPU at once, not so low that a busy desktop starves reflection altogether."""
LOOP_SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the interpreter lock keeps it once another asks for it."""


def lower_this_thread(by: int = BACKGROUND_NICENESS) -> None:
    """Run the calling thread, and the threads and processes it starts from now on, at
    background priority (a new thread or a forked child inherits its creator's)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not permitted
        thread = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(current + by, 19))


FULL_COLLECTIONS_BY_HAND = 1_000_000_000
"""The third ``gc`` threshold the daemon sets: never reached, so the collector never starts
a full collection by itself; :mod:`agentd.daemon.garbage_collection` starts them."""


def favour_the_event_loop() -> None:
    """In the daemon's process, once it is ready: hand the interpreter lock back to the
    loop sooner, keep what start-up built out of every later full collection, and leave
    full collections to the daemon (young ones run as before)."""
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTIONS_BY_HAND)
    collect_and_freeze()


def collect_and_freeze(*, frozen_too: bool = False) -> None:
    """Collect what is not frozen, then freeze what survived: later collections walk only
    what is made from now on.

    ``frozen_too`` collects what was frozen before as well (``gc.unfreeze`` first): an
    object frozen while alive may since have become garbage in a reference cycle, which
    only a walk over it frees. That walk takes a quarter of a second once litellm is
    loaded (400,000 objects), so it is kept for rare, quiet moments."""
    if frozen_too:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
