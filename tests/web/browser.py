"""Debian's Chromium driven by Playwright, for the web view's browser tests.

No browser is downloaded: Playwright starts ``/usr/bin/chromium`` (``.ci/run`` installs
it where it can), headless, with no sandbox of its own (CI runs as root), no GPU, no
background traffic, in a fresh profile (Playwright's own temporary one). A name chosen
by the test (:data:`REBOUND_HOST`) resolves to 127.0.0.1 inside this browser only, which
is how a DNS-rebinding page would reach the daemon.

Screenshots go to :data:`SCREENSHOTS` (under ``build/``, which git ignores), one PNG per
page the tests visit, overwritten by each run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
REBOUND_HOST = "rebound.test"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "web-screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--host-resolver-rules=MAP {REBOUND_HOST} 127.0.0.1",
]


def chromium() -> str | None:
    """Debian's Chromium, if it is installed."""
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    return shutil.which("chromium")


def screenshot_path(name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"


CHROMIUM = chromium()
BROWSER_TESTS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="Debian's chromium is not installed (apt-get install chromium; .ci/run does it "
        "as root): the web view's browser tests are skipped",
    ),
]
"""The marks of a module of browser tests (its ``pytestmark``)."""
