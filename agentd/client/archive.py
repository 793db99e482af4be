"""``agentctl export`` and ``agentctl import``: an agent as a ``.tar.gz``, over the socket.

The archive's bytes travel in the protocol (base64 pieces), not as a path: a daemon run
by systemd may not see the user's files (``PrivateTmp``, ``ProtectHome``). An export is
checked against the size and sha256 the daemon sums it to before it counts as written.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agentd.client.connection import Connection, unwrap
from shared import protocol
from shared.errors import ClientError


def cmd_export(conn: Connection, args: argparse.Namespace) -> int:
    if args.output is None and sys.stdout.isatty():
        print(
            "agentctl export: the archive is binary; redirect it "
            "(agentctl export > agent.tar.gz) or name a file with -o",
            file=sys.stderr,
        )
        return 2
    import hashlib  # here, not at the top: no other command of agentctl needs it

    with _destination(args.output) as out:
        sha, size = hashlib.sha256(), 0
        result: dict[str, Any] | None = None
        for message in conn.call("agent.export", {"agent": args.agent}):
            if message.get("event") == protocol.EVENT_ARCHIVE:
                piece = base64.b64decode(message["data"]["data"])
                sha.update(piece)
                size += len(piece)
                out.write(piece)
            elif "ok" in message:
                result = unwrap(message)
        assert result is not None  # call() ends with the final line
        if (size, sha.hexdigest()) != (result["bytes"], result["sha256"]):
            raise ClientError(
                "export_incomplete",
                f"received {size:,} bytes of {result['bytes']:,}, or they differ; export again",
            )
    exported = f"{result['name']} ({result['agent_id']}): {size:,} bytes"
    print(f"exported agent {exported}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _destination(output: str | None) -> Iterator[IO[bytes]]:
    """stdout, or ``output`` written beside it and renamed into place only when complete;
    private to the user whatever the umask, as the home it was read from is."""
    if output is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    partial = Path(f"{output}.part")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        with os.fdopen(os.open(partial, flags, 0o600), "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a .part left by an earlier run kept its mode
            yield handle
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


def cmd_import(conn: Connection, args: argparse.Namespace) -> int:
    upload, offset = None, 0
    try:
        source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"agentctl import: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    with source:
        while piece := source.read(protocol.ARCHIVE_CHUNK_BYTES):
            params = {
                "upload": upload,
                "offset": offset,
                "data": base64.b64encode(piece).decode("ascii"),
            }
            sent = conn.result("archive.upload", params)
            upload, offset = sent["upload"], sent["bytes"]
    if upload is None:
        print(f"agentctl import: {args.file} is empty", file=sys.stderr)
        return 2
    agent = conn.result(
        "agent.import", {"upload": upload, "keep_id": args.keep_id, "name": args.name}
    )
    print(
        f"imported agent {agent['name']} ({agent['id']}): {agent['conversations']} "
        f"conversation(s), memory at {agent['memory_head'][:7]}"
    )
    return 0
