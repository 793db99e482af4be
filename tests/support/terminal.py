"""A program on a pseudo-terminal, driven the way a person at a keyboard drives it.

Keys go in as text; Ctrl-C (:meth:`Terminal.interrupt`) becomes a SIGINT for the program,
as on a real terminal. What the program writes is read back until an expected text
appears, with a generous timeout instead of sleeps.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

from tests.support.waiting import ceiling, wait_for

CTRL_C = "\x03"
CTRL_D = "\x04"
UP = "\x1b[A"
ENTER = "\r"


class Terminal:
    def __init__(self, *argv: str, env: dict[str, str]) -> None:
        """Run ``python argv...`` as the session leader of a new terminal, its stdin,
        stdout and stderr. ``TERM=dumb`` and no inputrc keep readline's output plain."""
        env = {**env, "TERM": "dumb", "INPUTRC": os.devnull}
        pid, fd = pty.fork()
        if pid == 0:  # the child: become the program at once, as a shell starts it
            try:
                _signals_as_a_shell_leaves_them()
                os.execve(sys.executable, [sys.executable, *argv], env)
            finally:
                os._exit(127)
        self.pid = pid
        self.fd = fd
        self.screen = b""
        """Everything the program wrote so far."""
        self.read_up_to = 0
        """Where the text after the last expected one starts."""
        self.status: int | None = None

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def expect(self, text: str, timeout_s: float = 60.0) -> str:
        """Wait for ``text`` after what was expected last; return what came before it."""
        wanted = text.encode()
        limit = ceiling(timeout_s)
        deadline = time.monotonic() + limit
        while (found := self.screen.find(wanted, self.read_up_to)) < 0:
            remaining = deadline - time.monotonic()
            assert remaining > 0, (
                f"no {text!r} within {limit:.0f} s; the screen:\n{self.text}\n{self._state()}"
            )
            if not self._read(remaining):
                raise AssertionError(f"the program ended before {text!r}; the screen:\n{self.text}")
        before = self.screen[self.read_up_to : found].decode(errors="replace")
        self.read_up_to = found + len(wanted)
        return before

    def interrupt(self, timeout_s: float = 60.0) -> None:
        """Press Ctrl-C once the program is asleep waiting for input or an answer.

        Not before: CPython's readline only notices a signal that interrupts its wait
        for the next key (a SIGINT landing between drawing the prompt and that wait is
        seen at the next key), so pressing it the moment the prompt shows would race.
        A waiting program is in interruptible sleep, ``S`` in ``/proc/PID/stat``."""
        stat = Path(f"/proc/{self.pid}/stat")
        wait_for(
            lambda: stat.read_text().rpartition(")")[2].split()[0] == "S",
            "the program to wait for input or an answer",
            timeout_s=timeout_s,
            poll_s=0.005,
        )
        self.type(CTRL_C)

    def exit_status(self, timeout_s: float = 60.0) -> int:
        """Read to the end of the program's output, then its exit status."""
        limit = ceiling(timeout_s)
        deadline = time.monotonic() + limit
        while self._read(deadline - time.monotonic()):
            assert time.monotonic() < deadline, f"still running after {limit:.0f} s:\n{self.text}"
        _, status = os.waitpid(self.pid, 0)
        self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def _state(self) -> str:
        """What the program is doing, for a failure message: its scheduler state, its
        signal masks and where in the kernel it waits."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text().splitlines()
            wchan = Path(f"/proc/{self.pid}/wchan").read_text()
        except OSError as exc:
            return f"(the program's state is unreadable: {exc})"
        fields = [line for line in status if line.startswith(("State", "Sig", "Shd"))]
        return "the program: " + "; ".join(fields) + f"; waiting in {wchan or '-'}"

    @property
    def text(self) -> str:
        return self.screen.decode(errors="replace")

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)

    def _read(self, timeout_s: float) -> bool:
        """Read what is there within ``timeout_s``; False once the program has closed the
        terminal (Linux reports EIO on the master then)."""
        readable, _, _ = select.select([self.fd], [], [], max(timeout_s, 0))
        if not readable:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return False
        self.screen += chunk
        return bool(chunk)


def _signals_as_a_shell_leaves_them() -> None:
    """Default handling and nothing blocked: a program run from a shell gets Ctrl-C's
    SIGINT whatever the test process (a pytest worker, with the suite's libraries in
    it) did to its own signals, which a fork would hand on and an exec keeps when ignored
    or blocked."""
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
