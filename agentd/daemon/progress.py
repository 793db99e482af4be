"""What a slow step of a command is doing, while it does it.

``agentd doctor`` has steps that take seconds (importing litellm, waiting on an API that
does not answer); silence for that long looks like a hang. On a terminal a spinner runs
beside the step's name and is erased when the step ends, so the output reads the same
afterwards; anywhere else one line says what is going on. Both go to stderr: stdout keeps
only the results.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
FRAME_S = 0.1
_ERASE_LINE = "\r\033[K"


@contextmanager
def progress(what: str, doing: str, stream: TextIO | None = None) -> Iterator[None]:
    """Show ``what: doing…`` while the block runs."""
    out = stream or sys.stderr
    if not out.isatty():
        print(f"… {what}: {doing}", file=out, flush=True)
        yield
        return
    done = threading.Event()

    def spin() -> None:
        for frame in itertools.cycle(FRAMES):
            out.write(f"\r{frame} {what}: {doing}…")
            out.flush()
            if done.wait(FRAME_S):
                break
        out.write(_ERASE_LINE)
        out.flush()

    spinner = threading.Thread(target=spin, name="progress", daemon=True)
    spinner.start()
    try:
        yield
    finally:
        done.set()
        spinner.join()
