"""Where each test's home and worker directory go.

The temp directory: ``make test`` points ``TMPDIR`` at the tmpfs ``/dev/shm``, where the
fsyncs durability asks for cost nothing (a tenth of the suite's CPU on ext4, and the waits
for the disk). Unix socket paths are limited to ~107 bytes and the socket lies in the
home, so a temp directory with a longer path than this gives way to /tmp.
"""

from __future__ import annotations

import tempfile

_TEMP = tempfile.gettempdir()
HOMES = _TEMP if len(_TEMP) <= 16 else "/tmp"
