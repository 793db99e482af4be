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
  (``gc.freeze``, as the Python documentation suggests for long-running servers); what
  turns create later is collected as before.

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


def favour_the_event_loop() -> None:
    """In the daemon's process, once it is ready: hand the interpreter lock back to the
    loop sooner, and keep what start-up built out of every later full collection."""
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
