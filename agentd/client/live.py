"""A running turn as it streams: the reply's text printed piece by piece, every other
event's line as :func:`.render.print_event` prints it, and, while the model is waited on,
a line saying so and for how long.

The reply is printed on stdout as it arrives (``assistant_delta``) and its line ended when
the whole reply is in (``assistant``); a daemon that does not stream gets the whole reply
printed then, as before. Nothing but the reply reaches stdout, so a pipe reads exactly the
text.

The waiting line is for a person at a terminal: it is drawn on stderr, only when stderr
is a terminal, from a second after a model call starts (``model_call``, or a retry's
announcement) until anything else arrives, redrawn in place each second
(``  … waiting for openai/gpt-4o · 3 s``) and erased before anything else is printed. A
thread draws it, because the main thread is blocked reading the socket.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from agentd.client.render import print_event
from shared import protocol

SHOW_AFTER_S = 1.0
"""How long a model call runs before the waiting line appears (most first tokens come
sooner, and a line that flashes is noise)."""
_ERASE = "\r\x1b[K"


class TurnView:
    def __init__(self, *, show_waiting: bool) -> None:
        self.waiting = WaitingLine() if show_waiting else None
        self.streamed = ""
        """The text of the reply printed so far, its line not ended yet."""

    def event(self, name: str, data: dict[str, Any]) -> None:
        """Show one event of the turn."""
        if self.waiting is not None:
            self.waiting.stop()
        if name == protocol.EVENT_ASSISTANT_DELTA:
            self.streamed += data["text"]
            sys.stdout.write(data["text"])
            sys.stdout.flush()
            return
        if name == protocol.EVENT_ASSISTANT:
            self._whole(data["text"])
            return
        self.end_line()
        print_event(name, data)
        waits = name in (protocol.EVENT_MODEL_CALL, protocol.EVENT_PROVIDER_RETRY)
        if waits and self.waiting is not None:
            self.waiting.start(data["model"])

    def _whole(self, text: str) -> None:
        """The reply is complete: end its line, printing what was not streamed of it."""
        rest = text[len(self.streamed) :] if text.startswith(self.streamed) else None
        if rest is None:  # not what was streamed (never happens with agentd): print it whole
            self.end_line()
            rest = text
        self.streamed = ""
        print(rest, flush=True)

    def end_line(self) -> None:
        """End the line of a reply cut short (the turn failed, or was cancelled)."""
        if self.streamed:
            self.streamed = ""
            print(flush=True)

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting.stop()
        self.end_line()


class WaitingLine:
    """``  … waiting for MODEL · N s`` on stderr, redrawn each second by a thread."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._drawn = False

    def start(self, model: str) -> None:
        self.stop()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._draw, args=(model, time.monotonic(), self._stopped), daemon=True
        )
        self._thread.start()

    def _draw(self, model: str, since: float, stopped: threading.Event) -> None:
        if stopped.wait(SHOW_AFTER_S):
            return
        while True:
            waited = time.monotonic() - since
            sys.stderr.write(f"{_ERASE}  … waiting for {model} · {waited:.0f} s")
            sys.stderr.flush()
            self._drawn = True
            if stopped.wait(1.0 - waited % 1.0 + 0.01):
                return

    def stop(self) -> None:
        """Stop drawing and erase the line, before anything else is printed. A Ctrl-C can
        cut ``start`` short before its thread began: told to stop, that one draws nothing
        when it does begin, and there is nothing to wait for."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopped.set()
        if thread.is_alive():
            thread.join()
        if self._drawn:
            self._drawn = False
            sys.stderr.write(_ERASE)
            sys.stderr.flush()
