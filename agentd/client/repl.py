"""``agentctl chat``: one turn with ``-p``, else a read-eval-print loop, a turn per line.

On a terminal the loop edits lines with the standard library's ``readline`` and keeps
their history in ``$AGENTD_HOME/history``, names whom it talks to in a one-line banner,
and takes slash commands (:data:`HELP`). Ctrl-C during a turn cancels that turn and
returns to the prompt: the connection is closed, which is how the daemon learns a client
is gone (it cancels the turn and records it as cancelled), and the next request opens a
new one. At the prompt Ctrl-C discards the line typed, or leaves on an empty line, as
Ctrl-D does; both exit 0. Keys typed while a reply prints wait for the next prompt
(:mod:`.terminal_modes`), a Ctrl-D among them included. A line typed while the daemon is
down says so (``not_running``) and the chat goes on: the next line tries again.

A turn that stops on a tool call waiting for the user's yes is asked about in place
(``run bash `rm -rf build`? [y/N]``, see :func:`.approvals.ask`) and carried on; so is a
call already waiting in the conversation when the chat starts or moves to it, or when a
line is refused because one waits (``approval_pending``: that line is not sent; Up
brings it back).

When stdin is not a terminal (a script pipes lines in), there is no prompt, banner or
history: each line is a turn (or a command), the first error from the daemon stops the
loop as in ``sh -e``, and the exit status is 1 if any turn failed. Nothing is asked
there either: a turn that waits for approval stops the loop as ``chat -p`` would (what
waits and how to answer it on stderr, exit status 3).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from agentd.client import render
from agentd.client.approvals import ask
from agentd.client.chat import EXIT_WAITING, ended, stream, stream_turn
from agentd.client.connection import DISCONNECTED, NOT_RUNNING, Connection
from agentd.client.terminal_modes import keys_wait_for_prompt
from shared import home
from shared.errors import ClientError

PROMPT = "› "
HISTORY_LINES = 1_000
"""How many lines the history file keeps; older ones are dropped."""
COMMAND = re.compile(r"/[a-z]+")
"""A line whose first word is a slash and letters is a command; ``/usr/bin is …`` is
not, and the agent hears it."""
HELP = """\
/new          start a new conversation with this agent
/agent NAME   talk to agent NAME, in its default conversation
/help         this list
/exit, /quit  leave (so do Ctrl-D, and Ctrl-C on an empty line)
Ctrl-C during a turn cancels the turn.
A tool call that waits for your approval is asked about: y runs it; n, nothing or
other words deny it (your words are the reason the agent is told); Ctrl-C leaves it
waiting (`agentctl approvals`)."""


def cmd_chat(conn: Connection, args: argparse.Namespace) -> int:
    if args.prompt is not None:
        return stream_turn(conn, args.agent, args.conversation, args.prompt, as_json=args.json)
    return Repl(conn, args).run()


class LineEditor:
    """readline at the prompt, with a history that outlives the session: each line is
    appended to the file as it is entered, so a session that crashes or is killed keeps
    what was typed, and the file is cut to :data:`HISTORY_LINES` as it grows."""

    def __init__(self, history: Path) -> None:
        # Imported here, not at the top: only a terminal needs it, not every command.
        import readline

        self.readline = readline
        self.history: Path | None = history
        readline.set_auto_history(False)  # remember() adds lines, so memory matches file
        readline.set_history_length(HISTORY_LINES)
        try:
            os.close(os.open(history, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            readline.read_history_file(history)
        except OSError as exc:
            self.history = None
            print(f"history not kept ({exc}); chat goes on without it", file=sys.stderr)

    def read(self) -> str:
        return input(PROMPT)

    def typed(self) -> str:
        """The line being edited: still there after Ctrl-C interrupted :meth:`read`."""
        return self.readline.get_line_buffer()

    def remember(self, line: str) -> None:
        """Add ``line`` to the history (not again if it is the last line already)."""
        readline = self.readline
        if readline.get_history_item(readline.get_current_history_length()) == line:
            return
        readline.add_history(line)
        if self.history is None:
            return
        try:
            readline.append_history_file(1, self.history)
        except OSError as exc:
            self.history = None
            print(f"history not kept ({exc}); chat goes on without it", file=sys.stderr)


class Repl:
    def __init__(self, conn: Connection, args: argparse.Namespace) -> None:
        self.conn: Connection | None = conn
        """``None`` after a cancelled turn closed it; the next request opens another."""
        self.agent: str | None = args.agent
        self.conversation: str | None = args.conversation
        self.as_json: bool = args.json
        self.failed = False
        self.interactive = False
        self.waits = False
        """A turn of the script stopped waiting for approval (exit status 3)."""

    def run(self) -> int:
        try:
            if sys.stdin.isatty():
                self.interactive = True
                return self._interactive(LineEditor(home.history_path()))
            return self._script()
        finally:
            if self.conn is not None:
                self.conn.close()

    def _interactive(self, editor: LineEditor) -> int:
        self._show_where(self.agent, self.conversation)
        while True:
            try:
                line = editor.read().strip()
            except EOFError:
                print()
                return 0
            except KeyboardInterrupt:
                if not editor.typed():
                    print()
                    return 0
                print("^C")  # the line is discarded, as in a shell
                continue
            if not line:
                continue
            editor.remember(line)
            try:
                with keys_wait_for_prompt():
                    if not self._do(line):
                        return 0
            except KeyboardInterrupt:
                self._hang_up()
                print("\n  ■ turn cancelled", file=sys.stderr, flush=True)
            except ClientError as exc:
                if exc.code in (NOT_RUNNING, DISCONNECTED):
                    self._hang_up()  # the next line opens a new connection, or says why not
                print(f"{exc.code}: {exc.message}", file=sys.stderr, flush=True)

    def _script(self) -> int:
        for line in sys.stdin:
            if line.strip() and not self._do(line.strip()):
                break
        if self.waits:
            return EXIT_WAITING
        return 1 if self.failed else 0

    def _do(self, line: str) -> bool:
        """Say ``line`` to the agent or run it as a command; False to leave."""
        word, *rest = line.split(maxsplit=1)
        if not COMMAND.fullmatch(word):
            if not self.interactive:
                status = stream_turn(
                    self._connection(), self.agent, self.conversation, line, as_json=self.as_json
                )
                self.waits = status == EXIT_WAITING
                self.failed = self.failed or status == 1
                return not self.waits
            self._say(line)
            return True
        if word in ("/exit", "/quit"):
            return False
        if word == "/help":
            print(HELP, flush=True)
        elif word == "/new":
            created = self._connection().result("conversation.create", {"agent": self.agent})
            self._show_where(self.agent, created["id"])
        elif word == "/agent" and rest:
            self._show_where(rest[0], None)
        elif word == "/agent":
            print("usage: /agent NAME", file=sys.stderr, flush=True)
        else:
            print(f"unknown command {word}: /help lists the commands", file=sys.stderr, flush=True)
        return True

    def _say(self, line: str) -> None:
        """One turn at the terminal; what it leaves waiting for approval is asked about."""
        conn = self._connection()
        params = {"agent": self.agent, "conversation": self.conversation, "text": line}
        try:
            result = stream(conn, "chat", params, as_json=self.as_json)
        except ClientError as exc:
            if exc.code != "approval_pending":
                raise
            print(f"{exc.code}: {exc.message}", file=sys.stderr, flush=True)
            self._ask_waiting()
            return
        if result["stop_reason"] == "requires_approval":
            ask(conn, result.get("approvals") or [], as_json=self.as_json)
        else:
            ended(result, as_json=self.as_json)

    def _ask_waiting(self) -> None:
        """Ask about the calls of this conversation that wait for approval, if any."""
        conn = self._connection()
        listed = conn.result("approval.list", {"agent": self.agent})["approvals"]
        waiting = [c for c in listed if c["conversation_id"] == self.conversation]
        if waiting:
            print(f"  ■ {len(waiting)} tool call(s) of this conversation wait:", flush=True)
            ask(conn, waiting, as_json=self.as_json)

    def _show_where(self, agent: str | None, conversation: str | None) -> None:
        """Make the next turns go to ``agent`` and ``conversation`` (``None``: the default
        one, which the daemon creates on first use), and print them with the model in one
        line. An unknown agent or conversation raises and changes nothing."""
        conn = self._connection()
        where = conn.result("context.show", {"agent": agent, "conversation": conversation})
        record = conn.result("agent.show", {"agent": where["agent_id"]})
        self.agent, self.conversation = where["agent_id"], where["conversation_id"]
        render.print_chat_banner(record["name"], where)
        if self.interactive:
            self._ask_waiting()

    def _connection(self) -> Connection:
        if self.conn is None:
            self.conn = Connection()
        return self.conn

    def _hang_up(self) -> None:
        """Close the connection mid-request: the daemon cancels what it runs for us."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
