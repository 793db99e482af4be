"""The one place litellm is imported, with its network fetches off and its banners silenced.

litellm costs ~5 s to import and fetches a cost map from the network unless told not to,
so the modules that need it call :func:`import_litellm` when they first do (never at
import time: the daemon's mock runs and agentctl must not pay for it), and the offline
switches are set before that first import wherever it happens.
"""

from __future__ import annotations

import os
from types import ModuleType


def import_litellm() -> ModuleType:
    """Import litellm with its network fetches off and its stdout banners silenced."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    litellm.suppress_debug_info = True
    return litellm
