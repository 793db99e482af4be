"""The accept loop: a burst never holds more descriptors than the cap allows, and a process
out of descriptors still tells waiting clients ``busy`` instead of leaving them hanging."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.waiting import ceiling

OUT_OF_DESCRIPTORS = textwrap.dedent(
    """
    import asyncio, json, os, resource, select, socket, sys
    from pathlib import Path
    from agentd.daemon.listener import Listener, Slots, listen_at

    async def main(path: Path) -> dict:
        served = []
        async def hold(conn):
            served.append(conn)
            await asyncio.Event().wait()
        listener = Listener(
            listen_at(path, backlog=8), hold, slots=Slots(100), busy_line=b"busy\\n", name="test"
        )
        listener.start()
        clients = [socket.socket(socket.AF_UNIX) for _ in range(4)]
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
        filler = []
        while True:  # every descriptor taken, but the listener's spare
            try:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        for client in clients[:3]:
            client.connect(str(path))
        # the listener runs on this loop: let it answer (the test's timeout is the ceiling)
        while not select.select(clients[:3], [], [], 0)[0] == clients[:3]:
            await asyncio.sleep(0.01)
        answers = [client.recv(100).decode() for client in clients[:3]]
        for fd in filler:
            os.close(fd)
        clients[3].connect(str(path))
        while not served:
            await asyncio.sleep(0.01)
        return {"answers": answers, "served": len(served)}

    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))))
    """
)


def test_a_process_out_of_descriptors_still_tells_each_waiting_client_busy(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(tmp_path / "s.sock")],
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])  # after what the listener logged
    assert result["answers"] == ["busy\n"] * 3, "each was accepted with the spare and refused"
    assert result["served"] == 1, "once descriptors are free again, a client is served"
