"""A test module that names an SDK through :class:`tests.support.sdk.LazyModule` is
collected without importing it: only the tests that speak the SDK pay for its import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import ceiling

REPO = Path(__file__).resolve().parent.parent

SPEAKER = """
from tests.support.sdk import LazyModule

sdk = LazyModule("stand_in_target")


def test_speaks_the_sdk() -> None:
    assert sdk.VALUE == 1
"""

REPORTER = """
import sys


def pytest_collection_finish(session):
    print("collected; imported:", "stand_in_target" in sys.modules)


def pytest_sessionfinish(session):
    print("ran; imported:", "stand_in_target" in sys.modules)
"""


def test_collecting_a_module_that_names_an_sdk_does_not_import_it(tmp_path: Path) -> None:
    """Real collection, in a pytest of its own: it looks up pytest's private marks on every
    name of the module, and the stand-in must not import its module for those."""
    (tmp_path / "stand_in_target.py").write_text("VALUE = 1\n")
    (tmp_path / "test_speaker.py").write_text(SPEAKER)
    (tmp_path / "conftest.py").write_text(REPORTER)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")},
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
    }  # a pytest of its own: not the options or plugins the suite was run with

    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--collect-only"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )

    assert "collected; imported: False" in collected.stdout, collected.stdout + collected.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ran; imported: True" in ran.stdout, "the test that speaks the SDK imports it"
