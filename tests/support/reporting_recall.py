"""A recall process that says how it was started, then serves as the real one does.

Run by the daemon in place of ``agentd.recall.process`` (a test sets
``agentd.recall.client.RECALL_MODULE``): it writes to the file named by
``RECALL_REPORT`` the modules loaded in it, its process and group ids, its working
directory and that variable, so a test can see a forked start carry what a spawned one has.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from agentd.recall.process import main as serve

REPORT_ENV = "RECALL_REPORT"


def main(argv: list[str]) -> None:
    report = {
        "modules": sorted(sys.modules),
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
        "report": os.environ.get(REPORT_ENV),
    }
    Path(os.environ[REPORT_ENV]).write_text(json.dumps(report))
    serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
