"""A recall process whose catch-up on the logs waits until a file exists.

Run by the daemon in place of ``agentd.recall.process`` (a test sets
``agentd.recall.client.RECALL_MODULE``), with the file named by ``HELD_RECALL_RELEASE``:
a test can then look at the daemon while its index is still catching up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agentd.recall.service
from agentd.recall.process import main as serve
from shared.recall.documents import Document, read_documents
from tests.support.waiting import wait_for

RELEASE_ENV = "HELD_RECALL_RELEASE"


def _held(*args: Any, **kwargs: Any) -> Iterator[Document]:
    release = Path(os.environ[RELEASE_ENV])
    wait_for(release.exists, "the test to release the catch-up", timeout_s=60)
    yield from read_documents(*args, **kwargs)


def main(argv: list[str]) -> None:
    agentd.recall.service.read_documents = _held  # type: ignore[assignment]
    serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
