"""SDKs a test module speaks (OpenAI's client, the MCP SDK), imported at first use.

Each costs most of a second of CPU to import, and every xdist worker imports every test
module to collect it: a module-level ``import openai`` is paid by every worker for the one
that runs those tests. Such modules are marked ``sdk`` (tests/conftest.py runs them first,
together, on one worker) and name the SDK through :class:`LazyModule`.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name`` and imports it at the first public attribute asked of it.

    Collection looks at every name of a test module for pytest's private marks
    (``_fixture_function_marker``, ``__pytest_wrapped__``…): a private name is answered as
    missing without the import, or collecting would import the SDK after all.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)
