"""What the keyboard does while ``agentctl chat`` is not reading a line.

Between prompts (a reply printing, a command running) the terminal is in its cooked
mode: keys typed ahead are echoed into the reply's text, and a Ctrl-D typed ahead is
taken by the terminal itself as the end of an empty line, a NUL that readline reads as
nothing, so the user's "leave" is ignored. :func:`keys_wait_for_prompt` turns the echo
and the line editing off for that time (signals stay on: Ctrl-C still cancels the turn),
so every key typed waits, unseen and unchanged, for the next prompt, where readline shows
it on the line and a Ctrl-D leaves.

A question about a tool call is the exception: keys typed for the next prompt must not
answer a question they were never meant for (a ``y`` typed ahead approving a command),
so :func:`discard_typeahead` drops them before it is asked.
"""

from __future__ import annotations

import contextlib
import sys
import termios
from collections.abc import Iterator

_LFLAG = 3
_CC = 6


@contextlib.contextmanager
def keys_wait_for_prompt() -> Iterator[None]:
    """Hold keys typed in the body for the next prompt, at a terminal; elsewhere nothing."""
    try:
        fd = sys.stdin.fileno()
        cooked = termios.tcgetattr(fd)
    except (OSError, ValueError, termios.error):  # not a terminal, or stdin closed
        yield
        return
    held = [*cooked[:_CC], list(cooked[_CC])]
    held[_LFLAG] &= ~(termios.ICANON | termios.ECHO)
    held[_CC][termios.VMIN] = 1
    held[_CC][termios.VTIME] = 0
    # TCSANOW, never TCSAFLUSH: what was typed already is kept, in either direction.
    termios.tcsetattr(fd, termios.TCSANOW, held)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, cooked)


def discard_typeahead() -> None:
    """Drop the keys typed but not read yet, at a terminal; elsewhere nothing."""
    with contextlib.suppress(OSError, ValueError, termios.error):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
