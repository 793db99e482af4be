"""``python -m agentd.client``: agentctl without its console script (tests, a bare checkout)."""

import sys

from agentd.client import main

sys.exit(main())
